"""Which model a request means, the same way in every dialect.

Editors often name none: llama.vim's instruct request, llama.vscode's ``/infill``, a curl user of llama-server.
Such a request goes to the default model: the one the server was started with, else the only one loaded. With
neither, it is a 400 that lists the names a client may use.
"""

from __future__ import annotations

from fastapi import Request

from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest


def requested_model(request: Request, given: str | None) -> str:
    """The model ``given`` names (stripped), or the default one when it names none. Raises InvalidRequest."""
    name = (given or "").strip()
    if name:
        return name
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
