"""What the engine needs to know of an onnxruntime-genai model folder: ``genai_config.json`` for its shape and
context, the Hugging Face tokenizer files beside it for the chat template and special tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localinfer.backends.base import LoadSpec, ModelFacts
from localinfer.backends.hf_files import added_token_texts, chat_template, has_chatml_tokens, read_json, token_text

DEFAULT_CONTEXT = 4096


def model_folder(path: Path) -> Path:
    """The model folder of ``path``: the folder itself, or the folder of its ``genai_config.json``."""
    return path if path.is_dir() else path.parent


def trained_context(genai_config: dict[str, Any]) -> int:
    value = (genai_config.get("model") or {}).get("context_length")
    return value if isinstance(value, int) and value > 0 else DEFAULT_CONTEXT


def sliding_window(genai_config: dict[str, Any]) -> int:
    """The attention window of a sliding-window model (Gemma 3), else 0: its KV buffer must hold at least that."""
    decoder = (genai_config.get("model") or {}).get("decoder") or {}
    window = (decoder.get("sliding_window") or {}).get("window_size")
    return window if isinstance(window, int) and window > 0 else 0


def context_size(spec: LoadSpec, trained: int) -> int:
    """The longest request (prompt and reply) served: as asked, else the trained context up to ``ctx_cap``;
    never more than the model was trained for."""
    asked = spec.ctx_size or min(trained, spec.ctx_cap)
    return max(1, min(asked, trained))


def adds_bos(folder: Path, tokenizer: dict[str, Any], bos: str) -> bool:
    """Whether the tokenizer puts BOS in front of a prompt: ``add_bos_token`` when the config says, else whether
    ``tokenizer.json``'s post-processor template starts with it."""
    if isinstance(tokenizer.get("add_bos_token"), bool):
        return bool(tokenizer["add_bos_token"])
    post = read_json(folder / "tokenizer.json").get("post_processor") or {}
    processors = post.get("processors") if isinstance(post, dict) and post.get("type") == "Sequence" else [post]
    for processor in processors if isinstance(processors, list) else []:
        single = processor.get("single") if isinstance(processor, dict) else None
        if bos and isinstance(single, list) and single and isinstance(single[0], dict):
            return bool((single[0].get("SpecialToken") or {}).get("id") == bos)
    return False


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
        architecture=str(model.get("type") or "unknown"),
        n_params=0,
        n_slots=1,
        threads=threads,
        model_bytes=sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".onnx", ".data")),
    )
