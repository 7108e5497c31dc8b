"""What the engine needs to know of a model an engine process serves: from its ``/v1/models`` card and, for a
local Hugging Face folder, its ``config.json`` and ``tokenizer_config.json``. A repo id (no local folder) gets
defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from localinfer.backends.base import ModelFacts
from localinfer.backends.engine_process.recipe import Recipe
from localinfer.models.metadata.hf import (
    added_token_texts,
    architecture,
    chat_template,
    has_chatml_tokens,
    positive,
    read_json,
    token_text,
    trained_context,
    weights_bytes,
)
from localinfer.models.metadata.thinking import thinking_markers

DEFAULT_CONTEXT = 4096


def model_facts(
    path: Path, card: Mapping[str, Any], recipe: Recipe, *, ctx_size: int = 0, extra_args: Sequence[str] = ()
) -> ModelFacts:
    """Facts for the model at ``path`` served by ``recipe``'s engine with ``card`` (its ``max_model_len``, where
    the engine states one, is the context; the requests batched together are its max-seqs flag or default)."""
    config = read_json(path / "config.json")
    tokenizer = read_json(path / "tokenizer_config.json")
    trained = trained_context(config)
    return ModelFacts(
        n_ctx=positive(card.get("max_model_len")) or ctx_size or trained or DEFAULT_CONTEXT,
        n_ctx_train=trained or positive(card.get("max_model_len")) or DEFAULT_CONTEXT,
        chat_template=chat_template(path, tokenizer),
        bos_token=token_text(tokenizer.get("bos_token")),
        eos_token=token_text(tokenizer.get("eos_token")),
        add_bos=bool(tokenizer.get("add_bos_token", False)),
        has_chatml_tokens=has_chatml_tokens(added_token_texts(path, tokenizer)),
        thinking=thinking_markers(chat_template(path, tokenizer), added_token_texts(path, tokenizer).__contains__),
        architecture=architecture(config),
        n_params=0,
        n_slots=_max_seqs(recipe, extra_args),
        model_bytes=weights_bytes(path),
    )


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (``--flag V`` or ``--flag=V``), the last one winning."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


def renamed_flag(args: Sequence[str], flag: str, to: str | None) -> list[str]:
    """``args`` with ``flag`` (``--flag V`` or ``--flag=V``) written as ``to``; as they are when ``to`` is None."""
    if to is None or to == flag:
        return list(args)
    return [to if a == flag else to + a[len(flag) :] if a.startswith(flag + "=") else a for a in args]


def _max_seqs(recipe: Recipe, extra_args: Sequence[str]) -> int:
    flag = recipe.flags.max_seqs
    return (positive(flag_value(extra_args, flag)) if flag else None) or recipe.default_max_seqs
