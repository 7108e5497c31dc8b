"""A quick quality check of a conversion: do the GGUF (on llama.cpp) and its ONNX build (on onnxruntime-genai)
choose the same tokens?

Both models get the same prompt tokens (llama.cpp's tokenization). llama.cpp decodes greedily; the ONNX model is
then fed the same tokens (teacher forcing) and the check counts the positions where its top token is llama.cpp's
(``llama-perplexity --kl-divergence`` calls it "same top"). Each position is judged on its own: one near-tie that
flips does not count against every token after it. The greedy continuations are compared too, for how long they
stay alike; that count cascades (after one different token the two texts part ways) and says how far arithmetic
differences carry, not how much quality was lost: on a CPU without VNNI, onnxruntime computes int8 weights with
float activations where llama.cpp quantizes them to 8 bits, and SmolLM2's int8 build agrees on 31 of 32 top tokens
but on only the first 5 greedy tokens, while the same build with 8-bit activations (VNNI) agrees on all 32 of both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from localinfer.backends.onnx.model import GenaiModel

PROMPT = "Once upon a time, in a small village by the sea,"
N_TOKENS = 32


@dataclass(frozen=True)
class Agreement:
    """``top_agreed`` of ``compared`` positions have the same top token given the same text before them;
    ``agreed`` greedy tokens are the same from the start. An end of text counts as a token."""

    prompt: str
    compared: int
    agreed: int
    top_agreed: int
    reference: str  # llama.cpp's continuation
    candidate: str  # onnxruntime-genai's continuation
    same_prompt_tokens: bool  # both tokenizers read the prompt as the same tokens

    def summary(self) -> str:
        tokenizers = "" if self.same_prompt_tokens else "; the ONNX tokenizer reads the prompt differently"
        return (
            f"{self.top_agreed}/{self.compared} top tokens agree with llama.cpp on the GGUF, on the same text; "
            f"the greedy continuations agree for {self.agreed} tokens{tokenizers}"
        )


def greedy_agreement(gguf: Path, onnx_folder: Path, *, prompt: str = PROMPT, n_tokens: int = N_TOKENS) -> Agreement:
    """Decode ``n_tokens`` greedily from ``prompt`` with both models and compare. Raises what the loaders raise
    (ModelLoadError for the ONNX model, ValueError from llama-cpp-python)."""
    from llama_cpp import Llama

    onnx = GenaiModel.load(onnx_folder, None, 0)
    llama = Llama(str(gguf), n_ctx=256, n_batch=256, verbose=False)
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

    params = onnx.og.GeneratorParams(onnx.model)
    params.set_search_options(max_length=len(prompt_ids) + n_tokens + 1, do_sample=False)
    top_agreed = _top_agreement(onnx, params, prompt_ids, reference)
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
        compared=max(len(reference), len(candidate)),
        agreed=agreed,
        top_agreed=top_agreed,
        reference=reference_text,
        candidate=candidate_text,
        same_prompt_tokens=onnx.encode(prompt) in (prompt_ids, without_bos),
    )


def _top_agreement(onnx: GenaiModel, params: Any, prompt_ids: list[int], reference: list[int]) -> int:
    """How many of ``reference``'s tokens the ONNX model ranks first, fed ``prompt_ids`` and ``reference`` up to
    each position (teacher forcing)."""
    generator = onnx.og.Generator(onnx.model, params)
    try:
        generator.append_tokens(prompt_ids)
        agreed = 0
        for token in reference:
            logits = np.asarray(generator.get_logits()).reshape(-1)
            agreed += int(int(np.argmax(logits)) == token)
            generator.append_tokens([token])
        return agreed
    finally:
        del generator
