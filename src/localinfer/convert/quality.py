"""A quick quality check of a conversion: how far are the ONNX build's token distributions (on onnxruntime-genai)
from its GGUF's (on llama.cpp)?

The yardstick is ``localinfer perplexity --base``'s (``llama-perplexity --kl-divergence``'s), with the GGUF as the
base and the ONNX build as the model, so a conversion and a quantization are measured with one ruler: the first
``N_CHUNKS`` chunks of ``CTX`` tokens of the text perplexity ships (llama.cpp's tokenization, BOS as perplexity
puts it), each decoded by llama.cpp in one batch with perplexity's loader and fed to the ONNX model as one prompt
(teacher forcing), the second half of each scored. At every position the two next-token distributions give
KL(GGUF || ONNX) (terms where the GGUF's log probability is below -16 left out), whether both rank the same token
first, and the change of the correct token's probability, through ``perplexity.compare_positions``, the arithmetic
``perplexity.measure`` uses. Each position is judged on its own: one near-tie that flips does not count against
every token after it.

The greedy continuations of a fixed prompt (llama.cpp loaded as ``serve`` loads it) are compared too, for how long
they stay alike; that count cascades (after one different token the two texts part ways) and says how far
arithmetic differences carry, not how much quality was lost. On a CPU without VNNI, onnxruntime computes int8
weights with float activations where llama.cpp quantizes them to 8 bits: SmolLM2 135M Q4_1's int8 build then
parts from the GGUF's greedy text after 5 tokens while with 8-bit activations (VNNI) it agrees on all 32, yet its
divergence is no larger: mean KLD 0.015 (p99 0.10), the same top token at 92.9 % of 254 positions, against 0.022
(p99 0.18), 93.3 % with VNNI (the float case measured by setting every MatMulNBits to accuracy_level 1, what a CPU
without VNNI computes). A Q8_0 GGUF of the same weights measures 0.019 (p99 0.16), 95.3 % on the same positions;
the int4 build 1.09 (p99 5.8), 59.8 % (symmetric 4 bits for Q4_1's asymmetric blocks, and for the output
layer, which the GGUF keeps in Q8_0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from localinfer.backends.onnx.model import GenaiModel
from localinfer.quantize.perplexity import (
    Positions,
    _chunk_logits,
    _load,
    _log_probs,
    compare_positions,
    cut_chunks,
    default_text,
)

PROMPT = "Once upon a time, in a small village by the sea,"
N_TOKENS = 32  # greedy tokens compared
CTX = 256  # the chunks of quantize --check
N_CHUNKS = 2  # the second half of each is scored: 2 x 127 positions
_ROWS = 64  # positions compared at once


@dataclass(frozen=True)
class Agreement:
    """``positions`` compares the ONNX model with the GGUF on the same text (see ``perplexity.Positions``);
    ``agreed`` of ``compared`` greedy tokens are the same from the start. An end of text counts as a token."""

    prompt: str
    positions: Positions
    compared: int
    agreed: int
    reference: str  # llama.cpp's continuation
    candidate: str  # onnxruntime-genai's continuation
    same_prompt_tokens: bool  # both tokenizers read the prompt as the same tokens

    def summary(self) -> str:
        p = self.positions
        tokenizers = "" if self.same_prompt_tokens else "; the ONNX tokenizer reads the prompt differently"
        return (
            f"KLD from the GGUF: mean {p.kld_mean:.4f}, p99 {p.kld_p99:.3f}; "
            f"same top token {100 * p.same_top_share:.1f} % ({len(p)} positions); "
            f"mean Δp {100 * p.mean_delta_p:+.2f} %; "
            f"greedy continuations agree for {self.agreed} of {self.compared} tokens{tokenizers}"
        )


def greedy_agreement(
    gguf: Path, onnx_folder: Path, *, prompt: str = PROMPT, n_tokens: int = N_TOKENS, n_chunks: int = N_CHUNKS
) -> Agreement:
    """Compare the two models on the first ``n_chunks`` chunks of perplexity's default text, and decode
    ``n_tokens`` greedily from ``prompt`` with both. Raises what the loaders raise (ModelLoadError for the ONNX
    model, QuantizeError and ValueError for the GGUF), and ValueError for models with different vocabularies."""
    from llama_cpp import Llama

    onnx = GenaiModel.load(onnx_folder, None, 0)
    llama = Llama(str(gguf), n_ctx=256, n_batch=256, verbose=False)  # as serve runs it
    try:
        prompt_ids = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        ends = onnx.eos_ids | {llama.token_eos()}
        reference: list[int] = []
        for token in llama.generate(prompt_ids, top_k=1, temp=0.0, min_p=0.0, top_p=1.0):
            reference.append(token)
            if token in ends or len(reference) >= n_tokens:
                break
        reference_text = llama.detokenize([t for t in reference if t not in ends]).decode("utf-8", errors="replace")
        bos = llama.token_bos()
    finally:
        llama.close()
    positions = Positions.concatenate([_compare(chunk, base, onnx) for chunk, base in _base_logits(gguf, n_chunks)])

    params = onnx.og.GeneratorParams(onnx.model)
    params.set_search_options(max_length=len(prompt_ids) + n_tokens + 1, do_sample=False)
    generator = onnx.og.Generator(onnx.model, params)
    generator.append_tokens(prompt_ids)
    candidate: list[int] = []
    while not generator.is_done() and len(candidate) < n_tokens:
        generator.generate_next_token()
        candidate.append(int(generator.get_next_tokens()[0]))
    del generator
    candidate_text = str(onnx.tokenizer.decode([t for t in candidate if t not in ends]))
    without_bos = prompt_ids[1:] if prompt_ids[:1] == [bos] else prompt_ids  # ONNX's encode adds no BOS

    agreed = 0
    for a, b in zip(reference, candidate, strict=False):
        if a != b:
            break
        agreed += 1
    return Agreement(
        prompt=prompt,
        positions=positions,
        compared=max(len(reference), len(candidate)),
        agreed=agreed,
        reference=reference_text,
        candidate=candidate_text,
        same_prompt_tokens=onnx.encode(prompt) in (prompt_ids, without_bos),
    )


def _base_logits(gguf: Path, n_chunks: int) -> list[tuple[list[int], np.ndarray[Any, np.dtype[np.float32]]]]:
    """The first ``n_chunks`` chunks of ``CTX`` tokens of the default text, and the GGUF's logits for the second
    half of each, as ``perplexity`` (its loader, flash attention on) computes them."""
    llama = _load(gguf, CTX, None)
    try:
        tokens = llama.tokenize(default_text().encode("utf-8"), add_bos=True, special=False)
        chunks = cut_chunks(llama, tokens, CTX, min(n_chunks, len(tokens) // CTX))
        return [(chunk, np.array(_chunk_logits(llama, chunk, CTX // 2))) for chunk in chunks]  # copies of the views
    finally:
        llama.close()


def _teacher_forced(onnx: GenaiModel, tokens: list[int]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The ONNX model's logits after each of ``tokens`` but the last, fed as one prompt to a fresh generator (all
    positions' logits from one run, as llama.cpp decodes a chunk); one token at a time when the model's output has
    the last position only."""
    params = onnx.og.GeneratorParams(onnx.model)
    params.set_search_options(max_length=len(tokens) + 1, do_sample=False)
    generator = onnx.og.Generator(onnx.model, params)
    generator.append_tokens(tokens)
    logits = np.asarray(generator.get_output("logits"), dtype=np.float32)
    del generator
    if logits.ndim == 3 and logits.shape[1] == len(tokens):
        return logits[0, :-1]
    generator = onnx.og.Generator(onnx.model, params)
    rows = []
    for token in tokens[:-1]:
        generator.append_tokens([token])
        rows.append(np.asarray(generator.get_logits(), dtype=np.float32).reshape(-1))
    del generator
    return np.stack(rows)


def _compare(chunk: list[int], base_logits: np.ndarray[Any, np.dtype[np.float32]], onnx: GenaiModel) -> Positions:
    """``perplexity.compare_positions`` of the GGUF's logits for the second half of ``chunk`` with the ONNX
    model's, a block of rows at a time (in float64, a 262k-token vocabulary's rows are 2 MB each). Raises
    ValueError for vocabularies of different sizes."""
    logits = _teacher_forced(onnx, chunk)[CTX // 2 :]
    targets = np.asarray(chunk[CTX // 2 + 1 :])
    if logits.shape != base_logits.shape:
        raise ValueError(
            f"the ONNX model has {logits.shape[1]} tokens in its vocabulary and the GGUF {base_logits.shape[1]}"
        )
    return Positions.concatenate(
        [
            compare_positions(
                _log_probs(base_logits[i : i + _ROWS]), _log_probs(logits[i : i + _ROWS]), targets[i : i + _ROWS]
            )
            for i in range(0, len(targets), _ROWS)
        ]
    )
