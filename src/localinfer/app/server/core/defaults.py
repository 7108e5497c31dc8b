"""What a request leaves unset is served with: llama-server's ``--seed``, ``--temp`` and ``--n-predict``, in every
dialect. The server sets them once (``create_app``); each request's task reads them while its body is parsed, as
the defaults of the wire models' fields (``default_temperature``...), so a field the client sent always wins."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

D = TypeVar("D", int, None)  # how a dialect spells "random" (-1 or None)


@dataclass(frozen=True)
class RequestDefaults:
    """None: the dialect's own default."""

    temperature: float | None = None
    seed: int | None = None  # -1: a random one
    n_predict: int | None = None  # -1: until the context is full
    # a reasoning model's thinking (core/reasoning.py): llama-server's --reasoning-format, --reasoning,
    # --reasoning-budget and --chat-template-kwargs
    reasoning_format: str = "auto"  # auto or deepseek: kept apart; none: left in the answer
    reasoning: str = "auto"  # on, off, or auto: as the template has it
    reasoning_budget: int = -1  # thinking tokens before the end of thinking is forced; -1: no limit
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)


NONE_SET: Final = RequestDefaults()
_current: ContextVar[RequestDefaults] = ContextVar("localinfer_request_defaults", default=NONE_SET)


def use_request_defaults(defaults: RequestDefaults) -> None:
    """Serve the rest of this request's task with ``defaults``."""
    _current.set(defaults)


def current_defaults() -> RequestDefaults:
    """What this request's task is served with."""
    return _current.get()


def default_temperature(dialect_default: float) -> float:
    given = _current.get().temperature
    return dialect_default if given is None else given


def default_seed(dialect_default: D) -> D | int:
    """The seed of a request that sets none, in the dialect's spelling of "random" (``dialect_default``)."""
    given = _current.get().seed
    return dialect_default if given is None or given < 0 else given


def default_n_predict(dialect_default: int) -> int:
    """llama.cpp's ``n_predict`` of a request that sets none: -1 (until the context is full) or a count."""
    given = _current.get().n_predict
    return dialect_default if given is None else max(given, -1)


def default_max_tokens(dialect_default: int | None) -> int | None:
    """The token limit of a request that sets none, for a dialect where no limit is ``None``."""
    given = _current.get().n_predict
    if given is None:
        return dialect_default
    return None if given < 0 else given
