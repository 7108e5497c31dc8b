"""What every router reads from the app: the engine it serves (``create_app`` puts it on ``app.state``), and the
headers every stream of server-sent events goes with."""

from __future__ import annotations

from typing import Final

from fastapi import Request

from localinfer.engine.engine import Engine

# no caching, and no buffering by a proxy (nginx reads X-Accel-Buffering): each event goes out as it is written
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def engine_of(request: Request) -> Engine:
    """The engine of the app ``request`` came to."""
    engine: Engine = request.app.state.engine
    return engine
