"""What a model folder's Hugging Face tokenizer files say: the chat template, special tokens and their texts.

Used by every backend that serves a folder model (vLLM's Hugging Face folders, onnxruntime-genai folders). Files
that are missing or unreadable read as empty: a model without them gets the engine's fallbacks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


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


def has_chatml_tokens(texts: set[str]) -> bool:
    return "<|im_start|>" in texts and "<|im_end|>" in texts
