"""A quick quality check of a conversion: do the GGUF (on llama.cpp) and its ONNX build (on onnxruntime-genai)
choose the same tokens?

Both models get the same prompt tokens (llama.cpp's tokenization) and decode greedily; the check counts how many
leading tokens agree. Identical weights give identical tokens; requantizing (int8, int4) moves the logits a little,
and once one token differs the two continuations part ways, so the count is a coarse but honest measure of drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localinfer.backends.onnx.model import GenaiModel

PROMPT = "Once upon a time, in a small village by the sea,"
N_TOKENS = 32


@dataclass(frozen=True)
class Agreement:
    """``agreed`` of the ``compared`` greedy tokens are the same from the start; an end of text counts as a token."""

    prompt: str
    compared: int
    agreed: int
    reference: str  # llama.cpp's continuation
    candidate: str  # onnxruntime-genai's continuation
    same_prompt_tokens: bool  # both tokenizers read the prompt as the same tokens

    def summary(self) -> str:
        where = "" if self.agreed == self.compared else f" (first difference at token {self.agreed + 1})"
        tokenizers = "" if self.same_prompt_tokens else "; the ONNX tokenizer reads the prompt differently"
        return f"{self.agreed}/{self.compared} greedy tokens agree with llama.cpp on the GGUF{where}{tokenizers}"


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
    params.set_search_options(max_length=len(prompt_ids) + n_tokens, do_sample=False)
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
        reference=reference_text,
        candidate=candidate_text,
        same_prompt_tokens=onnx.encode(prompt) in (prompt_ids, without_bos),
    )
