"""What a model folder's Hugging Face files say: the tokenizer files' chat template, special tokens and their
texts, and ``config.json``'s trained context and architecture and the safetensors weights' size.

Used by every backend that serves a folder model (vLLM's Hugging Face folders, onnxruntime-genai folders). Files
that are missing or unreadable read as empty: a model without them gets the engine's fallbacks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from localinfer.models.metadata.thinking import thinking_markers
from localinfer.types import ThinkingMarkers


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or ``{}`` when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def token_text(token: object) -> str:
    """A special token as ``tokenizer_config.json`` writes it: a string, or an object with ``content``."""
    if isinstance(token, dict):
        return str(token.get("content") or "")
    return token if isinstance(token, str) else ""


def chat_template(path: Path, tokenizer: Mapping[str, Any]) -> str | None:
    """The folder's chat template: ``tokenizer_config.json``'s (the default of named ones), else
    ``chat_template.jinja``, else ``chat_template.json``; None when there is none."""
    template = tokenizer.get("chat_template")
    if isinstance(template, list):  # named templates: the default one, else the first
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if isinstance(template, str) and template:
        return template
    try:
        return (path / "chat_template.jinja").read_text(encoding="utf-8") or None
    except OSError:
        template = read_json(path / "chat_template.json").get("chat_template")
        return template if isinstance(template, str) and template else None


def added_token_texts(path: Path, tokenizer: Mapping[str, Any]) -> set[str]:
    """The texts of the tokenizer's added (special) tokens: ``tokenizer_config.json``'s ``added_tokens_decoder``
    and, since transformers 5 no longer writes that, ``tokenizer.json``'s ``added_tokens``."""
    added = tokenizer.get("added_tokens_decoder") or {}
    texts = {str(t.get("content")) for t in added.values() if isinstance(t, dict) and t.get("content")}
    tokens = read_json(path / "tokenizer.json").get("added_tokens") or []
    texts.update(str(t["content"]) for t in tokens if isinstance(t, dict) and t.get("content"))
    return texts


def read_folder_thinking(path: Path) -> ThinkingMarkers | None:
    """How the model of the folder at ``path`` marks its thinking, from its tokenizer files' chat template and
    added tokens, as metadata/thinking.py decides; None for a model that does not reason (or has no such files)."""
    tokenizer = read_json(path / "tokenizer_config.json")
    return thinking_markers(chat_template(path, tokenizer), added_token_texts(path, tokenizer).__contains__)


def has_chatml_tokens(texts: set[str]) -> bool:
    return "<|im_start|>" in texts and "<|im_end|>" in texts


def positive(value: object) -> int:
    """``value`` as a positive int, else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        return 0


def trained_context(config: Mapping[str, Any]) -> int:
    """The context ``config.json`` says the model was trained for (its language model's, for a multimodal one),
    else 0."""
    return positive(config.get("max_position_embeddings")) or positive(
        (config.get("text_config") or {}).get("max_position_embeddings")
    )


def architecture(config: Mapping[str, Any]) -> str:
    """``config.json``'s first architecture (``Qwen2ForCausalLM``), else its model type, else ``unknown``."""
    architectures = config.get("architectures") or [config.get("model_type") or "unknown"]
    return str(architectures[0])


def weights_bytes(path: Path) -> int:
    """Bytes of the folder's weights: its safetensors index's ``total_size``, else the ``.safetensors`` files'
    sizes, or a built TensorRT-LLM engine's ``rank*.engine`` files (one per GPU, each holding its share)."""
    index = read_json(path / "model.safetensors.index.json")
    total = positive((index.get("metadata") or {}).get("total_size"))
    if total:
        return total
    try:
        return sum(f.stat().st_size for f in path.glob("*.safetensors")) or sum(
            f.stat().st_size for f in path.glob("rank*.engine")
        )
    except OSError:
        return 0
