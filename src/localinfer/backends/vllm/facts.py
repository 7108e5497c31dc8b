"""What the engine needs to know of a model vLLM serves: from its ``/v1/models`` card and, for a local Hugging
Face folder, its ``config.json`` and ``tokenizer_config.json``. A repo id (no local folder) gets defaults."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from localinfer.backends.base import ModelFacts

DEFAULT_CONTEXT = 4096
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's --max-num-seqs when not given: requests it batches together


def model_facts(
    path: Path, card: Mapping[str, Any], *, ctx_size: int = 0, extra_args: Sequence[str] = ()
) -> ModelFacts:
    """Facts for the model at ``path`` served with ``card`` (vLLM's ``max_model_len`` is the context)."""
    config = _read_json(path / "config.json")
    tokenizer = _read_json(path / "tokenizer_config.json")
    trained = _positive(config.get("max_position_embeddings")) or _positive(
        (config.get("text_config") or {}).get("max_position_embeddings")
    )
    architectures = config.get("architectures") or [config.get("model_type") or "unknown"]
    added = tokenizer.get("added_tokens_decoder") or {}
    token_texts = {t.get("content") for t in added.values() if isinstance(t, dict)}
    return ModelFacts(
        n_ctx=_positive(card.get("max_model_len")) or ctx_size or trained or DEFAULT_CONTEXT,
        n_ctx_train=trained or _positive(card.get("max_model_len")) or DEFAULT_CONTEXT,
        chat_template=_chat_template(path, tokenizer),
        bos_token=_token_text(tokenizer.get("bos_token")),
        eos_token=_token_text(tokenizer.get("eos_token")),
        add_bos=bool(tokenizer.get("add_bos_token", False)),
        has_chatml_tokens="<|im_start|>" in token_texts and "<|im_end|>" in token_texts,
        architecture=str(architectures[0]),
        n_params=0,
        n_slots=_positive(flag_value(extra_args, "--max-num-seqs")) or DEFAULT_MAX_NUM_SEQS,
        model_bytes=_weights_size(path),
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _positive(value: object) -> int:
    """``value`` as a positive int, else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        return 0


def _token_text(token: object) -> str:
    if isinstance(token, dict):
        return str(token.get("content") or "")
    return token if isinstance(token, str) else ""


def _chat_template(path: Path, tokenizer: Mapping[str, Any]) -> str | None:
    template = tokenizer.get("chat_template")
    if isinstance(template, list):  # named templates: the default one, else the first
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if isinstance(template, str) and template:
        return template
    try:
        return (path / "chat_template.jinja").read_text(encoding="utf-8") or None
    except OSError:
        template = _read_json(path / "chat_template.json").get("chat_template")
        return template if isinstance(template, str) and template else None


def _weights_size(path: Path) -> int:
    index = _read_json(path / "model.safetensors.index.json")
    total = _positive((index.get("metadata") or {}).get("total_size"))
    if total:
        return total
    try:
        return sum(f.stat().st_size for f in path.glob("*.safetensors"))
    except OSError:
        return 0


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (``--flag V`` or ``--flag=V``), the last one winning."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value
