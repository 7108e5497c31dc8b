"""What a request body may cost before any route sees it: its size, how many JSON values it holds, how deep.

Parsing JSON holds Python's lock whatever thread it runs on, so a body's parse stalls every other request (and
``/health``) for as long as it takes. What bounds that stall is the body itself: at most ``max_bytes`` (413
beyond, known from Content-Length before a byte is read, or as soon as the bytes read pass it), at most
``MAX_JSON_VALUES`` separators (``,`` ``[`` ``{``, counted at C speed before parsing), at most ``MAX_JSON_DEPTH``
levels of nesting, valid UTF-8 without lone surrogates, no NaN or Infinity. A body that breaks a bound gets a 413
or 400 in its route's dialect and no route runs.

A client over ``max_bytes`` is usually still sending, and most clients (httpx, requests) read the answer only once
they have sent everything: a server that closed at once would leave them a connection reset. So the 413 is sent,
then the rest of the body is read and dropped (a lingering close, as nginx does) up to ``DRAIN_BYTES`` past the
limit and ``DRAIN_SECONDS``, and only then the connection closes. Past either bound it closes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Final

import pydantic_core
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localinfer.app.server.core.defaults import NONE_SET, use_request_defaults
from localinfer.app.server.core.dialect import dialect_for
from localinfer.app.server.core.media import MediaLimits, prefetch, use_media_limits
from localinfer.app.server.core.model_defaults import parameters_of, use_model_parameters
from localinfer.app.server.errors import error_body_for
from localinfer.engine.metrics import set_route

MAX_JSON_VALUES: Final = 100_000  # far more than any request within a context needs; parses in tens of ms
MAX_JSON_DEPTH: Final = 200  # pydantic-core's own recursion limit
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# How much of a refused body is read and dropped past the limit so that its client reads the 413. Dropping costs
# one chunk of memory at a time and, on loopback, a fraction of a second; 64 MiB covers by far the mistakes a 413
# answers (a pasted log, an image in a prompt), and a client sending more is not helped by an answer.
DRAIN_BYTES: Final = 64 * 1024 * 1024
DRAIN_SECONDS: Final = 30.0  # nginx's lingering_time: a slow sender does not hold its connection longer


class BodyLimits:
    """ASGI middleware: reads a request's body up to ``max_bytes``, checks it, and hands it on as it came."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS or _streamed(scope):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            # told 100-continue, the client sends nothing more once it reads the 413
            ended = _expects_continue(scope) or declared > self.max_bytes + DRAIN_BYTES
            await self._too_large(receive, send, scope, read=0, ended=ended)
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
                await self._too_large(receive, send, scope, read=size, ended=not message.get("more_body", False))
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

    async def _too_large(self, receive: Receive, send: Send, scope: Scope, *, read: int, ended: bool) -> None:
        """Answer 413, then, unless the body ``ended`` (or will not be read), drop the rest of it up to the drain
        bounds (``read`` bytes of it were read already) before the connection closes."""
        message = f"the request body is larger than {self.max_bytes} bytes; the server's --max-body sets the limit"
        answer = _refusal(scope, 413, message)
        await send({"type": "http.response.start", "status": 413, "headers": answer.raw_headers})
        await send({"type": "http.response.body", "body": answer.body, "more_body": True})
        if not ended:
            budget = self.max_bytes + DRAIN_BYTES - read
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_drop_body(receive, budget), DRAIN_SECONDS)
        await send({"type": "http.response.body", "body": b"", "more_body": False})  # the server closes now


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


def _streamed(scope: Scope) -> bool:
    """A body that is a file, streamed to disk by its route whatever its size (Ollama's blob uploads), not JSON."""
    return scope["method"] == "POST" and str(scope["path"]).startswith("/api/blobs/")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _expects_continue(scope: Scope) -> bool:
    return any(name == b"expect" and value.lower() == b"100-continue" for name, value in scope["headers"])


async def _drop_body(receive: Receive, budget: int) -> None:
    """Read the rest of a request's body and drop it, until it ends, the client goes, or ``budget`` bytes."""
    while budget >= 0:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        budget -= len(message.get("body", b""))


def _refusal(scope: Scope, status: int, message: str) -> JSONResponse:
    code = "request_too_large" if status == 413 else "invalid_body"
    body = error_body_for(dialect_for(scope["path"]), status, message, code=code)
    return JSONResponse(body, status_code=status, headers={"Connection": "close"})


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    await _refusal(scope, status, message)(scope, receive, send)


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
            use_request_defaults(getattr(request.app.state, "request_defaults", NONE_SET))
            use_model_parameters(parameters_of(request))  # a model's Modelfile parameters, under a request's own
            media_limits: MediaLimits = getattr(request.app.state, "media_limits", MediaLimits())
            use_media_limits(media_limits)
            parsed_request = _ParsedJSONRequest(_labelled_json(request.scope), request.receive)
            if media_limits.allow_urls and request.method == "POST":  # image URLs, before the body's wire model
                await _prefetch(parsed_request)
            return await handler(parsed_request)

        return parsed


async def _prefetch(request: _ParsedJSONRequest) -> None:
    """Fetch the image URLs the body names (core/media.py); a body that is not JSON is left to the route."""
    try:
        body = await request.json()
    except ValueError:
        return
    await prefetch(body)
