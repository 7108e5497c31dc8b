"""What a request body may cost before any route sees it: its size, how many JSON values it holds, how deep.

Parsing JSON holds Python's lock whatever thread it runs on, so a body's parse stalls every other request (and
``/health``) for as long as it takes. What bounds that stall is the body itself: at most ``max_bytes`` (413
beyond, known from Content-Length before a byte is read, or as soon as the bytes read pass it), at most
``MAX_JSON_VALUES`` separators (``,`` ``[`` ``{``, counted at C speed before parsing), at most ``MAX_JSON_DEPTH``
levels of nesting, valid UTF-8 without lone surrogates, no NaN or Infinity. A body that breaks a bound gets a 413
or 400 in its route's dialect and no route runs.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final

import pydantic_core
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localinfer.app.server.core.dialect import dialect_for
from localinfer.app.server.errors import error_body_for
from localinfer.engine.metrics import set_route

MAX_JSON_VALUES: Final = 100_000  # far more than any request within a context needs; parses in tens of ms
MAX_JSON_DEPTH: Final = 200  # pydantic-core's own recursion limit
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BodyLimits:
    """ASGI middleware: reads a request's body up to ``max_bytes``, checks it, and hands it on as it came."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        pending: list[Message] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: the app sees that next
                pending.append(message)
                break
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = json_problem(body)
        if problem is not None:
            await _refuse(scope, receive, send, 400, problem)
            return
        replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}, *pending]

        async def replayed() -> Message:
            return replay.pop(0) if replay else await receive()

        await self.app(scope, replayed, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"the request body is larger than {self.max_bytes} bytes; the server's --max-body sets the limit"
        await _refuse(scope, receive, send, 413, message)


def json_problem(body: bytes) -> str | None:
    """Why ``body`` is not a JSON document the server will parse, or None when it is (or is empty)."""
    if not body.strip():
        return None
    separators = body.count(b",") + body.count(b"[") + body.count(b"{")
    if separators > MAX_JSON_VALUES:
        return f"the request body holds too many JSON values (more than {MAX_JSON_VALUES}); send fewer or split it"
    try:
        parse_json(body)
    except ValueError as exc:
        if "recursion limit" in str(exc):  # pydantic-core names no error type: its message is all there is
            return f"the request body is nested more than {MAX_JSON_DEPTH} levels deep"
        return f"the request body is not valid JSON: {exc}"
    return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    code = "request_too_large" if status == 413 else "invalid_body"
    body = error_body_for(dialect_for(scope["path"]), status, message, code=code)
    await JSONResponse(body, status_code=status, headers={"Connection": "close"})(scope, receive, send)


def parse_json(body: bytes) -> Any:
    """``body`` as JSON, by pydantic-core's parser: a tenth of ``json.loads``'s time on a long prompt (a body that
    reached a route already passed ``json_problem``). Raises ValueError."""
    return pydantic_core.from_json(body, allow_inf_nan=False)


def _labelled_json(scope: Scope) -> Scope:
    """``scope`` with its body labelled JSON whatever label it came with: ``curl -d`` labels JSON a form, and
    llama-server and Ollama read it as JSON all the same (FastAPI would hand the route raw bytes). A browser page
    cannot use this to slip past CORS: the access guard refuses a state-changing request from a foreign origin
    whatever its content type, before any route runs."""
    headers = [(name, value) for name, value in scope["headers"] if name != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


class _ParsedJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class FastJSONRoute(APIRoute):
    """A route whose JSON body FastAPI reads with ``parse_json``: every millisecond a parse holds Python's lock is
    a millisecond every other request waits. The engine's metrics count its requests under its path."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        path = self.path

        async def parsed(request: Request) -> Response:
            set_route(path)  # for the rest of this request's task, whose streams the engine counts under it
            return await handler(_ParsedJSONRequest(_labelled_json(request.scope), request.receive))

        return parsed
