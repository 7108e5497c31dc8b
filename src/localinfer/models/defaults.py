"""What a model made from a Modelfile runs with unless a request says otherwise: its system prompt, chat template,
parameters, few-shot messages and license (Ollama's system, template, params, messages and license layers).

Parameters are Ollama's names with Ollama's types, only those localinfer honours (``PARAMETERS``); each request's
own fields win over them, as in Ollama. The record lives inside the model's manifest (``models/store.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from localinfer.types import ChatMessage, GenerationOptions

ParamValue = float | int | str | tuple[str, ...]
ParamKind = Literal["int", "float", "list"]

# Ollama's parameters that localinfer honours, with their types: sampling, the token limit, the stop strings, the
# prompt tokens a context shift keeps, and the context a model is loaded with
PARAMETERS: Final[Mapping[str, ParamKind]] = {
    "num_ctx": "int",
    "num_predict": "int",
    "num_keep": "int",
    "seed": "int",
    "top_k": "int",
    "repeat_last_n": "int",
    "temperature": "float",
    "top_p": "float",
    "min_p": "float",
    "repeat_penalty": "float",
    "presence_penalty": "float",
    "frequency_penalty": "float",
    "stop": "list",
}
# Ollama's parameters that localinfer does not have, with why (a Modelfile naming one is refused)
NOT_HONOURED: Final[Mapping[str, str]] = {
    "typical_p": "typical sampling is not supported",
    "mirostat": "mirostat sampling is not supported",
    "mirostat_tau": "mirostat sampling is not supported",
    "mirostat_eta": "mirostat sampling is not supported",
    "tfs_z": "tail-free sampling is not supported",
    "penalize_newline": "Ollama dropped it; it does nothing",
    "num_batch": "a runtime setting, not a model's: use 'serve --batch-size'",
    "num_gpu": "localinfer plans GPU layers itself: use 'serve --n-gpu-layers'",
    "main_gpu": "a runtime setting, not a model's: use 'serve --main-gpu'",
    "num_thread": "a runtime setting, not a model's: use 'serve --threads'",
    "use_mmap": "a runtime setting, not a model's",
    "use_mlock": "a runtime setting, not a model's",
    "low_vram": "Ollama dropped it; it does nothing",
    "f16_kv": "Ollama dropped it; it does nothing",
    "logits_all": "Ollama dropped it; it does nothing",
    "vocab_only": "Ollama dropped it; it does nothing",
    "numa": "a runtime setting, not a model's",
}
MESSAGE_ROLES: Final = ("system", "user", "assistant")


@dataclass(frozen=True)
class ModelDefaults:
    """``parameters`` sorted by name (``stop`` as a tuple of strings); ``messages`` as (role, content) turns put
    before every chat; ``template`` Jinja text (a Go template was translated when the model was made)."""

    system: str | None = None
    template: str | None = None
    parameters: tuple[tuple[str, ParamValue], ...] = ()
    messages: tuple[tuple[str, str], ...] = ()
    license: tuple[str, ...] = ()

    def parameter(self, name: str) -> ParamValue | None:
        return dict(self.parameters).get(name)

    @property
    def empty(self) -> bool:
        return self == NO_DEFAULTS


NO_DEFAULTS: Final = ModelDefaults()


def typed_parameter(name: str, value: Any) -> ParamValue:
    """``value`` (text from a Modelfile, or JSON from a request or Ollama's params layer) as ``name``'s type.

    Raises KeyError for a name localinfer does not honour and ValueError (saying the type) for a value of the
    wrong type."""
    kind = PARAMETERS[name]
    if kind == "list":
        items = value if isinstance(value, list | tuple) else [value]
        if not all(isinstance(item, str) for item in items):
            raise ValueError("takes text")
        return tuple(items)
    if isinstance(value, bool):
        raise ValueError(f"takes {'an integer' if kind == 'int' else 'a number'}, not {str(value).lower()}")
    try:
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value) if not isinstance(value, str) else int(value.strip())
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"takes {'an integer' if kind == 'int' else 'a number'}, not {value!r}") from None


def merged_parameters(
    base: tuple[tuple[str, ParamValue], ...], given: Mapping[str, ParamValue]
) -> tuple[tuple[str, ParamValue], ...]:
    """``given`` over ``base``, name by name (as Ollama merges a new params layer over its base model's)."""
    return tuple(sorted({**dict(base), **given}.items()))


def to_json(defaults: ModelDefaults) -> dict[str, Any]:
    return {
        "system": defaults.system,
        "template": defaults.template,
        "parameters": {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.parameters},
        "messages": [{"role": r, "content": c} for r, c in defaults.messages],
        "license": list(defaults.license),
    }


def from_json(data: Mapping[str, Any]) -> ModelDefaults:
    """Raises KeyError, TypeError or ValueError for a record that is not one."""
    parameters = tuple(sorted((k, typed_parameter(k, v)) for k, v in dict(data.get("parameters") or {}).items()))
    return ModelDefaults(
        system=_text_or_none(data.get("system")),
        template=_text_or_none(data.get("template")),
        parameters=parameters,
        messages=tuple((str(m["role"]), str(m["content"])) for m in data.get("messages") or ()),
        license=tuple(str(t) for t in data.get("license") or ()),
    )


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"not text: {value!r}")
    return value


def with_defaults(messages: tuple[ChatMessage, ...], defaults: ModelDefaults) -> tuple[ChatMessage, ...]:
    """A chat's turns after its model's: the request's system turn if it starts with one, else the model's system
    prompt; then the model's few-shot messages; then the rest of the request's turns (Ollama's order)."""
    if defaults.system is None and not defaults.messages:
        return messages
    own = messages[:1] if messages and messages[0].role == "system" else ()
    system = own or ((ChatMessage("system", defaults.system),) if defaults.system else ())
    shots = tuple(ChatMessage(role, content) for role, content in defaults.messages)
    return (*system, *shots, *messages[len(own) :])


_SAMPLING_FIELDS: Final = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "seed",
)


def with_parameters(options: GenerationOptions, defaults: ModelDefaults, given: Collection[str]) -> GenerationOptions:
    """``options`` with the model's parameters where the caller set nothing (``given``: the Ollama names of what it
    set), for callers that build core options themselves (``localinfer run``)."""
    own = {k: v for k, v in defaults.parameters if k not in given}
    sampling: dict[str, Any] = {k: own[k] for k in _SAMPLING_FIELDS if k in own}
    out = dataclasses.replace(options, sampling=dataclasses.replace(options.sampling, **sampling))
    limit = own.get("num_predict")
    if isinstance(limit, int) and limit > 0:
        out = dataclasses.replace(out, max_tokens=limit)
    stop = own.get("stop")
    if isinstance(stop, tuple):
        out = dataclasses.replace(out, stop=(*out.stop, *stop))
    keep = own.get("num_keep")
    return dataclasses.replace(out, n_keep=keep) if isinstance(keep, int) else out
