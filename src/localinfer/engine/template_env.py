"""The Jinja environment chat templates render in, with what llama.cpp's own renderer (common/jinja, which
llama-server uses) gives a template, so that a template renders here as it renders there:

- the globals ``raise_exception``, ``strftime_now`` (the local time, as llama.cpp's) and ``tojson`` (also a filter:
  ``json.dumps`` as Python writes it, nothing escaped for HTML, as llama.cpp and Hugging Face write it);
- the variables llama.cpp sets on every chat: ``datetime`` (``Nov 27 2026``) and ``date_string`` (``27 Nov 2026``),
  which Llama 3.x and firefunction-v2 read for today's date;
- llama.cpp's leniency with what is missing: a name nobody set, or ``none``, joined to a string with ``+`` is an
  empty string (firefunction-v2 adds ``functions``, which llama-server never sets); an attribute of something
  undefined is undefined; looping over it loops over nothing.

The sandbox stays immutable: no Python internals, attribute tricks or files (there is no loader).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, NoReturn

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localinfer.errors import InvalidRequest


class _Undefined(jinja2.ChainableUndefined):
    """A missing name as llama.cpp's renderer treats one: chained attributes stay undefined, ``+`` with a string
    is that string."""

    def __add__(self, other: object) -> Any:
        if isinstance(other, str):
            return other
        return super().__add__(other)

    def __radd__(self, other: object) -> Any:
        if isinstance(other, str):
            return other
        return super().__radd__(other)


class TemplateEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, with ``none + "text"`` as llama.cpp reads it (an empty string and the text)."""

    intercepted_binops = frozenset({"+"})

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "+":
            if left is None and isinstance(right, str):
                return right
            if right is None and isinstance(left, str):
                return left
        return super().call_binop(context, operator, left, right)


def environment() -> TemplateEnvironment:
    """A fresh environment for one template's source."""
    env = TemplateEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"], undefined=_Undefined
    )
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, tojson=_tojson)
    env.filters["tojson"] = _tojson
    return env


def dates(now: dt.datetime | None = None) -> dict[str, str]:
    """The date variables llama.cpp gives every chat template (its ``common_chat_extra_context``), for ``now``
    (default: the local time now)."""
    moment = now or dt.datetime.now()
    return {"datetime": moment.strftime("%b %d %Y"), "date_string": moment.strftime("%d %b %Y")}


def _raise_exception(message: str) -> NoReturn:
    raise InvalidRequest(f"the model's chat template refused the messages: {message}", param="messages")


def _strftime_now(fmt: str) -> str:
    return dt.datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | list[str] | None = None,
    sort_keys: bool = False,
) -> str:
    """``value`` as JSON, as Hugging Face and llama.cpp's renderers write it for a template's ``tojson``."""
    seps = tuple(separators) if separators else None
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=seps,  # type: ignore[arg-type]
        sort_keys=sort_keys,
        default=_plain,
    )


def _plain(value: Any) -> Any:
    """What JSON cannot hold as it is: an undefined value as null, anything else as its text."""
    if isinstance(value, jinja2.Undefined):
        return None
    return str(value)
