"""A thin Starlette (and so FastAPI) adapter over ``EngineProxy``: one route that forwards what it receives."""

from __future__ import annotations

from collections.abc import Callable

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from localinfer.backends.vllm.proxy import EngineProxy

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


async def forward(proxy: EngineProxy, request: Request) -> Response:
    """Forward ``request`` (its path as the client sent it) through ``proxy``; the answer streams back as sent."""
    body = await request.body()
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
    raw_path: bytes = request.scope.get("raw_path") or b""  # as sent, percent-escapes kept
    path = raw_path.decode("latin-1") or request.url.path
    answer = await proxy.forward(request.method, path, headers, body, query=request.url.query)
    response = StreamingResponse(answer.body, status_code=answer.status, background=BackgroundTask(answer.aclose))
    response.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    return response


def proxy_route(get_proxy: Callable[[Request], EngineProxy], path: str = "/v1/{path:path}") -> Route:
    """A route forwarding every request under ``path`` to the proxy ``get_proxy`` returns for it."""

    async def endpoint(request: Request) -> Response:
        return await forward(get_proxy(request), request)

    return Route(path, endpoint, methods=METHODS)
