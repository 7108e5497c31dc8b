"""What an onnxruntime-genai model folder's ``genai_config.json`` says (its trained context and sliding window),
whether its tokenizer puts BOS in front of a prompt, and its weights' size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localinfer.models.metadata.hf import read_json

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


def weights_bytes(folder: Path) -> int:
    """Bytes of the ``.onnx`` and ``.data`` files directly in ``folder``."""
    return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".onnx", ".data"))
