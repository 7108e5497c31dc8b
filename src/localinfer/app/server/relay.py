"""Relays OpenAI requests for a model served by an engine process (vLLM) to that engine as they are.

Its answers come back byte for byte (see ``backends.engine_process.proxy``), so every field vLLM supports (tools, guided
decoding, logprobs, ``n``) works. Requests for any other model, unknown names and bodies that are not JSON
go on to the app's own routes, which answer or refuse them as usual. Requests without the server's key never
get here: the access guard outside refuses them first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localinfer.app.server.errors import openai_error
from localinfer.app.server.limits import parse_json
from localinfer.backends.base import Relay
from localinfer.engine.relay_metrics import RELAYED_ROUTES
from localinfer.errors import LocalInferError

RELAYED_PATHS: Final = RELAYED_ROUTES  # the routes relayed, which the relayed requests' metrics are labelled by
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]

RelayFor = Callable[[str], Awaitable[Relay | None]]


class EngineRelay:
    """ASGI middleware: POSTs to ``RELAYED_PATHS`` whose ``model`` ``relay_for`` maps to a proxy are forwarded
    there; everything else reaches ``app`` unchanged (the body read here is handed on)."""

    def __init__(self, app: ASGIApp, relay_for: RelayFor) -> None:
        self.app = app
        self.relay_for = relay_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in RELAYED_PATHS:
            await self.app(scope, receive, send)
            return
        body, receive = await _buffered(receive)
        model = _model_of(body)
        request = Request(scope, receive)
        try:
            proxy = await self.relay_for(model) if model else None
        except LocalInferError as exc:
            status, error = openai_error(exc)
            await JSONResponse(error, status_code=status)(scope, receive, send)
            return
        if proxy is None:
            await self.app(scope, receive, send)
            return
        response = await forward(proxy, request)
        await response(scope, receive, send)


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a ``receive`` that gives it again before what follows (a disconnect)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away: pass that on
            pending: list[Message] = [message]
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            pending = []
            break
    body = b"".join(chunks)
    replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}, *pending]

    async def replayed() -> Message:
        return replay.pop(0) if replay else await receive()

    return body, replayed


def _model_of(body: bytes) -> str | None:
    try:
        data = parse_json(body)
    except ValueError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


async def forward(relay: Relay, request: Request) -> Response:
    """Forward ``request`` (its path as the client sent it) through ``relay``; the answer streams back as sent."""
    body = await request.body()
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
    raw_path: bytes = request.scope.get("raw_path") or b""  # as sent, percent-escapes kept
    path = raw_path.decode("latin-1") or request.url.path
    answer = await relay.forward(request.method, path, headers, body, query=request.url.query)
    response = StreamingResponse(answer.body, status_code=answer.status, background=BackgroundTask(answer.aclose))
    response.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    return response


def relay_route(get_relay: Callable[[Request], Relay], path: str = "/v1/{path:path}") -> Route:
    """A route forwarding every request under ``path`` to the relay ``get_relay`` returns for it."""

    async def endpoint(request: Request) -> Response:
        return await forward(get_relay(request), request)

    return Route(path, endpoint, methods=METHODS)
