"""The logits a context holds for a step (step_limits.py): as many as llama-server's context holds for the same
slots and drafts (llama.cpp's ``n_outputs_max``, which sizes the compute buffer: device memory on a GPU), and no
fewer than the step loop asks when every slot verifies its longest draft at once (asking more aborts the process).

Compared with llama-server built from the same vendored source, started with the same slots and drafts: its log
and llama.cpp's log under localinfer's loader say the same ``n_outputs_max`` and the same compute buffer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.step_costs import StepCosts
from localinfer.backends.llamacpp.step_limits import MAX_SLOT_STEP, output_limits
from localinfer.models.store import Manifest
from localinfer.types import GenerationOptions, GenerationRequest, SamplingParams
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

OUTPUTS = re.compile(r"n_outputs_max\s*=\s*(\d+)")
COMPUTE_BUFFER = re.compile(r"CPU compute buffer size\s*=\s*([\d.]+) MiB")

# (localinfer's load options, llama-server's flags) for the same two slots of 512 tokens
SETTINGS = {
    "no drafts": ({"speculation": "off"}, ()),
    "16-token drafts": (
        {"speculation": "ngram", "draft_max": 16},
        ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "16"),
    ),
}


def said(pattern: re.Pattern[str], lines: Sequence[str]) -> list[str]:
    return [m.group(1) for line in lines if (m := pattern.search(line))]


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_a_context_holds_the_logits_llama_servers_holds_for_the_same_slots_and_drafts(
    setting: str, gemma3: Manifest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Gemma 3 270M, whose 262,144-token vocabulary makes the logits most of the compute buffer: llama.cpp's
    default would hold them for every token of a 512-token micro-batch (514.50 MiB)."""
    ours, theirs = SETTINGS[setting]
    # a stream of 512 cells per slot, as localinfer's cache (llama-server's default is one stream for all), and
    # llama.cpp's own lines in its log (-lv 4)
    with llama_server(gemma3.path, tmp_path, "-c", "1024", "-np", "2", "--no-kv-unified", "-lv", "4", *theirs):
        pass
    [server_log] = tmp_path.glob("llama-server-*.log")
    their_lines = server_log.read_text(errors="replace").splitlines()
    with caplog.at_level(logging.DEBUG, logger="localinfer.backends.llamacpp.model"):
        model = LlamaModel.load(LoadSpec(path=gemma3.path, ctx_size=512, parallel=2, threads=2, **ours))  # type: ignore[arg-type]
    model.free()
    our_lines = [record.getMessage() for record in caplog.records]
    assert said(OUTPUTS, our_lines) == said(OUTPUTS, their_lines) == [str(2 * (1 + model.draft_room))]
    assert said(COMPUTE_BUFFER, our_lines)[0] == said(COMPUTE_BUFFER, their_lines)[0]


class Knows:
    """Proposes what the model will pick: the tokens a plain greedy run of the same prompt generated."""

    def __init__(self, replies: dict[tuple[int, ...], list[int]], prompt: Sequence[int], shared: bool) -> None:
        self.reply = replies[tuple(prompt)]
        self.at = 0

    def extend(self, tokens: Sequence[int]) -> None:
        self.at += len(tokens)

    def propose(self, n_max: int) -> list[int]:
        return self.reply[self.at : self.at + n_max]


class Widths(StepCosts):
    """Steps that cost the same at any width (so a draft pays at any length, and is as long as the room allows),
    which keep every width they are told of: the steps whose tokens all asked for logits."""

    def __init__(self) -> None:
        super().__init__({1: 10.0, 2: 10.0, 256: 10.0})
        self.seen: list[int] = []

    def record(self, width: int, ms: float) -> None:
        self.seen.append(width)


PROMPTS = ("Count from one to fifty:", "List the planets of the solar system:", "Name twenty animals:")
GREEDY = GenerationOptions(
    sampling=SamplingParams(temperature=0.0), max_tokens=160, ignore_eos=True, cache_prompt=False, logprobs=1
)


async def generated(backend: LlamaCppBackend, prompt: str) -> list[int]:
    ids: list[int] = []
    async for chunk in backend.generate(GenerationRequest("test", prompt, GREEDY)):
        ids.extend(token.id for token in chunk.logprobs)
    return ids


async def test_every_slot_verifying_its_longest_draft_in_one_step_asks_no_more_logits_than_the_context_holds(
    smollm2: Manifest,
) -> None:
    """Three slots, each fed the tokens it will generate as its draft: the steps grow until each slot verifies a
    draft as long as the room the context holds logits for (62 tokens after its own), all three in one step, which
    llama.cpp computes; every reply is the plain run's."""
    spec = LoadSpec(path=smollm2.path, ctx_size=512, parallel=3, threads=2)
    plain = LlamaCppBackend()
    await plain.load(LoadSpec(path=smollm2.path, ctx_size=512, parallel=3, threads=2, speculation="off"))
    try:
        expected = await asyncio.gather(*(generated(plain, prompt) for prompt in PROMPTS))
        replies = {
            tuple(await plain.tokenize(prompt, add_special=True, parse_special=True)): ids
            for prompt, ids in zip(PROMPTS, expected, strict=True)
        }
    finally:
        await plain.unload()
    widths = Widths()
    backend = LlamaCppBackend(draft_source=functools.partial(Knows, replies), drafting_slots=3, step_costs=widths)
    await backend.load(spec)
    try:
        drafted = await asyncio.gather(*(generated(backend, prompt) for prompt in PROMPTS))
    finally:
        await backend.unload()
    room = output_limits(spec, parallel=3, n_seq=3).draft_room
    assert room == MAX_SLOT_STEP - 1
    assert drafted == expected
    assert max(widths.seen) == 3 * (1 + room)  # the context's n_outputs_max, every logit of it asked for
