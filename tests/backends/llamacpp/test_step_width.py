"""Whether a token's logits depend on how many tokens its step computes, on this CPU: what greedy identity with and
without drafts rests on. Without drafts a lone request's step computes one token; a step that verifies a draft
computes several of the same sequence. Each test feeds one fixed text after a prompt, once a token a step (as
without drafts) and once in steps of ``width`` tokens (as drafts that are all kept), and compares the logits at
every position.

What was found (2026-11-26, llama.cpp as vendored by llama-cpp-python 0.3.36):

- **f16 cache (the default):** alike to the bit while the sequence holds at most 256 cells. Past that, llama.cpp
  pads the attention to 512 cells, and a step with one query takes flash attention's split-KV kernel (ggml-cpu
  ops.cpp, ``use_split_kv_path``: one query, f16 or f32 keys and values of one type, 512 cells or more), while two
  queries or more take the per-row kernel. Logits then differ by up to ~1, and greedy picks can flip.
- **q8_0 cache:** neither the split-KV nor the tiled kernel takes a quantized cache, so SmolLM2 (Q4_1 weights)
  computes alike at every width. Gemma 3's weights are not: its Q4_K matrices are repacked for this CPU, and ggml
  multiplies them a row at a time below four rows and four at a time from four on. So on Gemma 3 only steps of one
  to three tokens compute alike, whatever the cache. Which wider steps then agree among themselves depends on the
  build, and is not asserted: with AVX512-FP16, eight rows differed from four; without it (scripts/setup since
  2026-11-26), with an f16 cache, steps of 4, 8 and 16 agree and 5, 6 and 9 differ from them, and with a q8_0 cache
  8 and 16 agree and differ from 4.

These are facts of the kernels, not promises of llama.cpp: should a build change one, a test here says so and the
docs (docs/benchmarks.md, "Greedy identity") can follow.
"""

from __future__ import annotations

from collections.abc import Iterator

import llama_cpp.llama_cpp as lc
import numpy as np
import numpy.typing as npt
import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.sampling import logits_at
from localinfer.models.store import Manifest
from tests.backends.llamacpp.raw_decode import decode_prompt, decode_with_logits
from tests.backends.llamacpp.test_speculation import GEMMA3_ALIKE_ROWS, greedy, loaded, reply

pytestmark = pytest.mark.model

PARAGRAPH = (
    "The lighthouse keeper climbed the stairs every evening, trimmed the wick, wound the clockwork that turned the "
    "lens, and wrote the weather, the ships he had seen and the state of the lamp in his log book. "
)
FOLLOWING = 18  # positions compared after the prompt (a multiple of 2 and 3: no step of one token in them)


class Stepper:
    """A model loaded as the server loads it (one slot), that computes a prompt and then a fixed text in steps of a
    given width, with logits at every position."""

    def __init__(self, manifest: Manifest, cache_type: str) -> None:
        self.model = LlamaModel.load(
            LoadSpec(path=manifest.path, ctx_size=2048, threads=2, cache_type_k=cache_type, cache_type_v=cache_type)
        )
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.model.vocab))
        self.batch = lc.llama_batch_init(2048, 0, 1)
        self.text = self.model.tokenize(PARAGRAPH * 40, add_special=True, parse_special=False)
        self.prompt = 0  # how many of the text's tokens the cache holds as the prompt

    def logits(self, cached: int, width: int) -> npt.NDArray[np.float32]:
        """The logits at each of FOLLOWING positions after a prompt of ``cached`` tokens, computed ``width`` a step
        (the prompt is computed once for all widths: only what follows it is removed and computed again)."""
        assert self.model.ctx is not None
        memory = lc.llama_get_memory(self.model.ctx)
        if self.prompt == cached:
            lc.llama_memory_seq_rm(memory, 0, cached, -1)
        else:
            lc.llama_memory_seq_rm(memory, 0, 0, -1)
            decode_prompt(self.model.ctx, self.text[:cached])
            self.prompt = cached
        rows: list[npt.NDArray[np.float32]] = []
        for start in range(cached, cached + FOLLOWING, width):
            tokens = self.text[start : min(start + width, cached + FOLLOWING)]
            decode_with_logits(self.model.ctx, self.batch, tokens, start)
            rows.extend(logits_at(self.model.ctx, i, self.n_vocab).copy() for i in range(len(tokens)))
        return np.stack(rows)

    def close(self) -> None:
        lc.llama_batch_free(self.batch)
        self.model.free()


@pytest.fixture(scope="module", params=["smollm2-f16", "gemma3-f16", "smollm2-q8_0", "gemma3-q8_0"])
def stepper(request: pytest.FixtureRequest) -> Iterator[Stepper]:
    name, cache_type = request.param.split("-")
    result = Stepper(request.getfixturevalue(name), cache_type)
    yield result
    result.close()


def alike(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> bool:
    return bool(np.array_equal(a, b))


@pytest.mark.parametrize("stepper", ["smollm2-f16", "gemma3-f16"], indirect=True)
def test_an_f16_cache_computes_one_token_as_two_or_three_up_to_256_cells(stepper: Stepper) -> None:
    one = stepper.logits(200, 1)  # 200 + 18 cells: llama.cpp attends over 256
    for width in range(2, GEMMA3_ALIKE_ROWS + 1):  # the widths the Gemma 3 identity tests keep their steps to
        assert alike(stepper.logits(200, width), one), width


@pytest.mark.parametrize("stepper", ["smollm2-f16", "gemma3-f16"], indirect=True)
def test_past_256_cells_an_f16_cache_computes_a_lone_token_with_another_kernel(stepper: Stepper) -> None:
    one, two = stepper.logits(300, 1), stepper.logits(300, 2)
    assert np.abs(one - two).max() > 1e-3  # the split-KV kernel for one query; two take the per-row one
    assert alike(stepper.logits(300, 3), two)  # and steps of two or three agree among themselves


@pytest.mark.parametrize("stepper", ["smollm2-q8_0"], indirect=True)
def test_a_q8_0_cache_computes_smollm2_alike_at_every_width(stepper: Stepper) -> None:
    one = stepper.logits(300, 1)
    for width in (2, 5, 16):
        assert alike(stepper.logits(300, width), one), width


@pytest.mark.parametrize("stepper", ["gemma3-q8_0"], indirect=True)
def test_a_q8_0_cache_computes_gemma3_alike_below_four_tokens_past_256_cells(stepper: Stepper) -> None:
    one = stepper.logits(300, 1)
    assert alike(stepper.logits(300, 2), one)
    assert alike(stepper.logits(300, 3), one)


@pytest.mark.parametrize("stepper", ["gemma3-f16"], indirect=True)
def test_gemma3s_repacked_weights_compute_four_rows_otherwise_than_one(stepper: Stepper) -> None:
    one = stepper.logits(200, 1)  # within 256 cells, where attention computes alike at any width
    assert not alike(stepper.logits(200, GEMMA3_ALIKE_ROWS + 1), one)


async def test_with_a_q8_0_cache_prompt_lookup_keeps_smollm2s_greedy_text_past_256_cells(smollm2: Manifest) -> None:
    """End to end, the configuration above that computes alike at every width: the server's step loop, drafts from
    the prompt, a ~500-token prompt and a reply that copies it."""
    log = "".join(f"Day {day}: " + PARAGRAPH for day in range(1, 11))
    prompt = f"<|im_start|>user\n{log}\nCopy the entries for days 9 and 10.<|im_end|>\n<|im_start|>assistant\n"
    texts, kept = {}, 0
    for speculation in ("off", "ngram"):
        backend = await loaded(smollm2, speculation=speculation, cache_type_k="q8_0", cache_type_v="q8_0")
        try:
            texts[speculation], timings = await reply(backend, prompt, greedy(128, cache_prompt=False))
        finally:
            await backend.unload()
        assert timings.prompt_n > 450
        kept += timings.draft_n_accepted
    assert kept > 32  # drafts were verified and kept, several tokens a step
    assert texts["ngram"] == texts["off"]
