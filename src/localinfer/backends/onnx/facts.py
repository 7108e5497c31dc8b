"""What the engine needs to know of an onnxruntime-genai model folder loaded with a LoadSpec: ``genai_config.json``
for its shape and context, the Hugging Face tokenizer files beside it for the chat template and special tokens
(all read by ``models.metadata``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localinfer.backends.base import LoadSpec, ModelFacts
from localinfer.models.metadata.hf import added_token_texts, chat_template, has_chatml_tokens, read_json, token_text
from localinfer.models.metadata.onnx import adds_bos, trained_context, weights_bytes
from localinfer.models.metadata.thinking import thinking_markers


def context_size(spec: LoadSpec, trained: int) -> int:
    """The longest request (prompt and reply) served: as asked, else the trained context up to ``ctx_cap``;
    never more than the model was trained for."""
    asked = spec.ctx_size or min(trained, spec.ctx_cap)
    return max(1, min(asked, trained))


def model_facts(folder: Path, spec: LoadSpec, *, threads: int = 0) -> ModelFacts:
    """Facts for the onnxruntime-genai model in ``folder`` loaded with ``spec``."""
    genai = read_json(folder / "genai_config.json")
    model: dict[str, Any] = genai.get("model") or {}
    tokenizer = read_json(folder / "tokenizer_config.json")
    trained = trained_context(genai)
    bos = token_text(tokenizer.get("bos_token"))
    return ModelFacts(
        n_ctx=context_size(spec, trained),
        n_ctx_train=trained,
        chat_template=chat_template(folder, tokenizer),
        bos_token=bos,
        eos_token=token_text(tokenizer.get("eos_token")),
        add_bos=adds_bos(folder, tokenizer, bos),
        has_chatml_tokens=has_chatml_tokens(added_token_texts(folder, tokenizer)),
        thinking=thinking_markers(chat_template(folder, tokenizer), added_token_texts(folder, tokenizer).__contains__),
        architecture=str(model.get("type") or "unknown"),
        n_params=0,
        n_slots=1,
        threads=threads,
        model_bytes=weights_bytes(folder),
    )
