"""A model's own parameters (its Modelfile's ``PARAMETER`` lines) as the defaults of a request to it, in every
dialect: each field the request leaves unset (absent or null) is filled from them before the body is validated, so
a field the client sent always wins, as in Ollama. Over the server's defaults (core/defaults.py), which apply to
what neither sets.

The server sets, per request, how a model's parameters are found (``use_model_parameters``); each dialect's body
names which of its fields each parameter fills (``fill``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final

from fastapi import Request

from localinfer.app.server.core.model_name import requested_model
from localinfer.engine.engine import Engine
from localinfer.errors import LocalInferError
from localinfer.models.defaults import PARAMETERS, ParamValue

Lookup = Callable[[str | None], Mapping[str, ParamValue]]  # the named (None: the default) model's parameters
Convert = Callable[[ParamValue], Any]  # a parameter's value as the field takes it (None: the field stays unset)

_lookup: ContextVar[Lookup] = ContextVar("localinfer_model_parameters", default=lambda _: {})


def use_model_parameters(lookup: Lookup) -> None:
    """Fill the rest of this request's task's bodies with the parameters ``lookup`` finds for the model named."""
    _lookup.set(lookup)


def parameters_of(request: Request) -> Lookup:
    """How ``request``'s body finds its model's parameters: the model it names (or the default one), by the
    engine of its app; none for a name that names no model (the request fails on its own later)."""

    def lookup(name: str | None) -> Mapping[str, ParamValue]:
        engine: Engine | None = getattr(request.app.state, "engine", None)
        if engine is None:
            return {}
        try:
            return dict(engine.model_defaults(requested_model(request, name)).parameters)
        except LocalInferError:
            return {}

    return lookup


def as_is(value: ParamValue) -> Any:
    return list(value) if isinstance(value, tuple) else value


def positive(value: ParamValue) -> Any:
    """A token limit where the dialect says "no limit" by leaving it out: Ollama's -1 and -2 leave it out."""
    return value if isinstance(value, int) and value > 0 else None


def at_least(low: float) -> Convert:
    return lambda value: value if isinstance(value, int | float) and value >= low else None


def at_most(high: float) -> Convert:
    return lambda value: value if isinstance(value, int | float) and value <= high else None


SAMPLING: Final[Mapping[str, tuple[str, Convert]]] = {  # llama.cpp's names of Ollama's sampling parameters
    "temperature": ("temperature", as_is),
    "top_k": ("top_k", as_is),
    "top_p": ("top_p", as_is),
    "min_p": ("min_p", as_is),
    "repeat_penalty": ("repeat_penalty", as_is),
    "repeat_last_n": ("repeat_last_n", as_is),
    "presence_penalty": ("presence_penalty", as_is),
    "frequency_penalty": ("frequency_penalty", as_is),
    "seed": ("seed", as_is),
    "stop": ("stop", as_is),
}


OLLAMA: Final[Mapping[str, tuple[str, Convert]]] = {  # num_ctx is the engine's: a model loads with it
    name: (name, as_is) for name in PARAMETERS if name != "num_ctx"
}
OPENAI: Final = {
    **SAMPLING,
    "temperature": ("temperature", at_most(2.0)),
    "repeat_last_n": ("repeat_last_n", at_least(0)),
    "num_predict": ("max_tokens", positive),
}
LLAMA_CPP: Final = {**SAMPLING, "num_predict": ("n_predict", at_least(-1)), "num_keep": ("n_keep", as_is)}
# fields that say what another does: a request that sets one sets the other (llama-server's max_tokens for n_predict)
_SAME: Final = {"n_predict": ("max_tokens",)}
ANTHROPIC: Final = {
    "temperature": ("temperature", at_most(1.0)),
    "top_p": ("top_p", as_is),
    "top_k": ("top_k", as_is),
    "stop": ("stop_sequences", as_is),
}


def fill(data: Any, fields: Mapping[str, tuple[str, Convert]], *, inside: str | None = None) -> Any:
    """``data`` (a body as parsed JSON) with the fields it leaves unset filled from its model's parameters:
    ``fields`` maps a parameter's name to the field (in the object ``inside`` names, else at the top) and how its
    value is written there. Anything that is not a JSON object is left for validation to refuse."""
    if not isinstance(data, dict):
        return data
    model = data.get("model") or data.get("name")
    parameters = _lookup.get()(model if isinstance(model, str) else None)
    if not parameters:
        return data
    out = dict(data)
    target = out.get(inside) if inside is not None else out
    if inside is not None:
        if target is not None and not isinstance(target, dict):
            return data
        target = out[inside] = dict(target or {})
    assert isinstance(target, dict)
    for name, (field, convert) in fields.items():
        unset = all(target.get(f) is None for f in (field, *_SAME.get(field, ())))
        if name in parameters and unset:
            value = convert(parameters[name])
            if value is not None:
                target[field] = value
    return out
