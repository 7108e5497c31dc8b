"""What the engine needs to know of a model vLLM serves: from its ``/v1/models`` card and, for a local Hugging
Face folder, its ``config.json`` and ``tokenizer_config.json``. A repo id (no local folder) gets defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from localinfer.backends.base import ModelFacts
from localinfer.backends.hf_files import added_token_texts, chat_template, has_chatml_tokens, read_json, token_text

DEFAULT_CONTEXT = 4096
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's --max-num-seqs when not given: requests it batches together


def model_facts(
    path: Path, card: Mapping[str, Any], *, ctx_size: int = 0, extra_args: Sequence[str] = ()
) -> ModelFacts:
    """Facts for the model at ``path`` served with ``card`` (vLLM's ``max_model_len`` is the context)."""
    config = read_json(path / "config.json")
    tokenizer = read_json(path / "tokenizer_config.json")
    trained = _positive(config.get("max_position_embeddings")) or _positive(
        (config.get("text_config") or {}).get("max_position_embeddings")
    )
    architectures = config.get("architectures") or [config.get("model_type") or "unknown"]
    return ModelFacts(
        n_ctx=_positive(card.get("max_model_len")) or ctx_size or trained or DEFAULT_CONTEXT,
        n_ctx_train=trained or _positive(card.get("max_model_len")) or DEFAULT_CONTEXT,
        chat_template=chat_template(path, tokenizer),
        bos_token=token_text(tokenizer.get("bos_token")),
        eos_token=token_text(tokenizer.get("eos_token")),
        add_bos=bool(tokenizer.get("add_bos_token", False)),
        has_chatml_tokens=has_chatml_tokens(added_token_texts(path, tokenizer)),
        architecture=str(architectures[0]),
        n_params=0,
        n_slots=_positive(flag_value(extra_args, "--max-num-seqs")) or DEFAULT_MAX_NUM_SEQS,
        model_bytes=_weights_size(path),
    )


def _positive(value: object) -> int:
    """``value`` as a positive int, else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        return 0


def _weights_size(path: Path) -> int:
    index = read_json(path / "model.safetensors.index.json")
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
