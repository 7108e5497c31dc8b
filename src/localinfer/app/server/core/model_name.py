"""Which model a request means, the same way in every dialect.

Editors often name none: llama.vim's instruct request, llama.vscode's ``/infill``, a curl user of llama-server.
Such a request goes to the default model: the one the server was started with, else the only one loaded. With
neither, it is a 400 that lists the names a client may use.

A server started with one model (``serve MODEL``, no ``--pin``) answers llama-server's way on the OpenAI, Anthropic
and llama.cpp routes: a name it does not know (``gpt-3.5-turbo``, ``claude-sonnet-4``, ``text-embedding-3-small``)
gets that model, and the answer names the model served. A name the library lists still gets its own model, and
Ollama's routes keep Ollama's 404, which its clients act on (they pull the model). A name that looks like a path is
never taken for anything: it keeps the same 404 as ever (``looks_like_path``). ``--strict-model-names`` turns the
fallback off.
"""

from __future__ import annotations

import ntpath
import re

from fastapi import Request

from localinfer.app.server.core.dialect import Dialect, dialect_for
from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest

_PARTS = re.compile(r"[\\/]")


def requested_model(request: Request, given: str | None, *, managing: bool = False) -> str:
    """The model ``given`` names (stripped), or the default one when it names none; on a one-model server, that
    model for a name nobody serves, unless the request is ``managing`` the model it names (loading or unloading
    it: a name nobody serves must not unload the one that is). Raises InvalidRequest."""
    name = (given or "").strip()
    if name:
        return name if managing else _served_for(request, name)
    engine: Engine = request.app.state.engine
    default: str | None = getattr(request.app.state, "default_model", None)
    if default:
        return default
    loaded = engine.loaded()
    if len(loaded) == 1:
        return loaded[0].name
    names = ", ".join(sorted(m.name for m in engine.models())) or "none yet; pull one with 'localinfer pull MODEL'"
    raise InvalidRequest(
        f"the request names no model and the server has no default one; models: {names}", param="model"
    )


def looks_like_path(name: str) -> bool:
    """Whether ``name`` reads as a file path: absolute (``/x``, ``C:\\x``), from a home (``~``), climbing (``..``),
    or a ``.gguf`` file's name. Such a name is never resolved to a model other than by the library's own lists."""
    return (
        name.startswith(("/", "\\", "~"))
        or bool(ntpath.splitdrive(name)[0])
        or ".." in _PARTS.split(name)
        or name.lower().endswith(".gguf")
    )


def _served_for(request: Request, name: str) -> str:
    aliases: dict[str, str] = getattr(request.app.state, "aliases", {})
    if name in aliases:
        return aliases[name]
    fallback: str | None = getattr(request.app.state, "one_model", None)
    if fallback is None or name == fallback or looks_like_path(name) or dialect_for(request.url.path) is Dialect.OLLAMA:
        return name
    engine: Engine = request.app.state.engine
    return name if engine.knows(name) else fallback
