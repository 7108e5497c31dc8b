"""Forwards OpenAI requests to an engine's server and relays its answers byte for byte, with no web framework.

The engine's key replaces whatever ``Authorization`` the client sent (checking the client's key is the app's
job). When the engine cannot be reached, or its process has exited, the answer is a 502 in OpenAI's error
shape. When it dies mid-answer, an event stream (SSE) ends at once with a last ``data: {"error": ...}`` event
(a partial event is dropped first); any other body raises ``EngineStreamBroken`` so the client's connection is
cut rather than ended as if complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import httpx

HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
DROPPED_REQUEST_HEADERS: Final = HOP_BY_HOP | {"host", "authorization", "content-length"}
DROPPED_RESPONSE_HEADERS: Final = HOP_BY_HOP | {"date", "server"}  # the front server sets its own
WATCH_INTERVAL = 0.25  # seconds between checks that the engine process is alive while waiting for it

Headers = list[tuple[str, str]]
T = TypeVar("T")


class EngineStreamBroken(Exception):
    """The engine stopped in the middle of a body that is not an event stream."""


class _EngineExited(Exception):
    """The engine's process exited while a request to it was waiting."""


@dataclass(frozen=True)
class ProxyResponse:
    """The engine's answer: consume ``body`` to the end, or ``aclose`` the answer, to free the connection."""

    status: int
    headers: Headers
    body: AsyncGenerator[bytes, None]
    upstream: httpx.Response | None = None

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.body])

    async def aclose(self) -> None:
        """Stop relaying and close the engine's connection (which aborts the request there), read or not."""
        await self.body.aclose()
        if self.upstream is not None:
            await self.upstream.aclose()


def engine_error_body(message: str) -> dict[str, Any]:
    """OpenAI's error shape for an engine that cannot answer."""
    return {"error": {"message": message, "type": "server_error", "param": None, "code": "engine_unavailable"}}


def engine_unavailable(message: str) -> ProxyResponse:
    """A 502 answer in OpenAI's error shape."""
    body = json.dumps(engine_error_body(message)).encode()

    async def once() -> AsyncGenerator[bytes, None]:
        yield body

    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    return ProxyResponse(502, headers, once())


class EngineProxy:
    """Talks to one engine server at ``base_url`` with its ``api_key``; ``alive`` says whether its process runs."""

    def __init__(
        self, base_url: str, api_key: str, *, alive: Callable[[], bool] = lambda: True, connect_timeout: float = 5.0
    ) -> None:
        self._api_key = api_key
        self._alive = alive
        timeout = httpx.Timeout(None, connect=connect_timeout)
        self._client = httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=httpx.Limits(max_connections=None))

    async def forward(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> ProxyResponse:
        """Send one request to the engine and return its status, headers and streaming body.

        Never raises for an unreachable or exited engine: that answers 502 (see the module's docstring).
        """
        if not self._alive():
            return engine_unavailable("the engine process has exited")
        sent = [(k.lower(), v) for k, v in headers if k.lower() not in DROPPED_REQUEST_HEADERS]
        if not any(k == "accept-encoding" for k, _ in sent):
            sent.append(("accept-encoding", "identity"))  # not httpx's default gzip: relay what the client asked
        sent.append(("authorization", f"Bearer {self._api_key}"))
        url = httpx.URL(path, query=query.encode()) if query else path
        request = self._client.build_request(method, url, headers=sent, content=body)
        try:
            response = await self._watched(self._client.send(request, stream=True))
        except (httpx.TransportError, _EngineExited) as exc:
            return engine_unavailable(_reason(exc))
        kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in DROPPED_RESPONSE_HEADERS]
        return ProxyResponse(response.status_code, kept, self._relay(response), response)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _relay(self, response: httpx.Response) -> AsyncGenerator[bytes, None]:
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        chunks = response.aiter_raw()
        pending = b""  # an event stream's bytes after its last complete event
        watch = _ExitWatch(self._alive)
        try:
            while True:
                try:
                    chunk = await watch.read(chunks)
                except (httpx.TransportError, _EngineExited) as exc:
                    if not is_sse:
                        raise EngineStreamBroken(_reason(exc)) from exc
                    yield b"data: " + json.dumps(engine_error_body(_reason(exc))).encode() + b"\n\n"
                    return
                if chunk is None:
                    break
                if not is_sse:
                    yield chunk
                    continue
                pending += chunk
                end = _events_end(pending)
                if end:
                    yield pending[:end]
                    pending = pending[end:]
            if pending:
                yield pending
        finally:
            await watch.aclose()
            await response.aclose()

    async def _watched(self, awaitable: Coroutine[Any, Any, T]) -> T:
        """Await ``awaitable``; raise _EngineExited (cancelling it) once the engine process has exited."""
        task = asyncio.ensure_future(awaitable)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=WATCH_INTERVAL)
                if done:
                    return task.result()
                if not self._alive():
                    raise _EngineExited
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # marked retrieved: it was raised above, or is dropped with the cancelled wait


class _ExitWatch:
    """Reads of one streamed answer that end with _EngineExited once the engine process is gone and nothing came
    for WATCH_INTERVAL, as a timed wait per read would, but checked by one task for the whole answer (a relay reads
    a token's chunk hundreds of times a second, in the reader's own task). That task cancels a read that was already
    waiting at its previous check, with the engine gone at this one (a read that data could still end has ended by
    then), and the cancellation becomes _EngineExited."""

    def __init__(self, alive: Callable[[], bool]) -> None:
        self._alive = alive
        self._reader: asyncio.Task[Any] | None = None  # the task waiting in read(), if one is
        self._reads = 0  # reads started: which one is waiting
        self._exited = False
        self._poll = asyncio.ensure_future(self._poll_alive())

    async def _poll_alive(self) -> None:
        waiting_since_last_check = -1  # the read that was waiting at the previous check
        while True:  # a process to poll: there is no event to wait on
            await asyncio.sleep(WATCH_INTERVAL)
            reader = self._reader
            waiting = self._reads if reader is not None else -1
            if reader is not None and waiting == waiting_since_last_check and not self._alive():
                self._exited = True
                reader.cancel()
                return
            waiting_since_last_check = waiting

    async def read(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        """The next chunk, None at the end. Raises _EngineExited when the engine is gone."""
        self._reads += 1
        self._reader = asyncio.current_task()
        try:
            return await _next(chunks)
        except asyncio.CancelledError:
            if not self._exited:
                raise
            # Python 3.11+ counts cancellations: one more than ours is the client's, and wins. On 3.10 a client
            # leaving at the very moment the engine is found gone gets the error event its relay then ends with.
            uncancel = getattr(self._reader, "uncancel", None)
            if uncancel is not None and uncancel() > 0:
                raise
            raise _EngineExited from None
        finally:
            self._reader = None

    async def aclose(self) -> None:
        self._poll.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._poll


async def _next(chunks: AsyncIterator[bytes]) -> bytes | None:
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return None


def _events_end(data: bytes) -> int:
    """Where the last complete SSE event in ``data`` ends (0: none yet)."""
    return max(
        (i + len(sep) for sep in (b"\n\n", b"\r\n\r\n") if (i := data.rfind(sep)) >= 0),
        default=0,
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, _EngineExited):
        return "the engine process exited during the request"
    return f"the engine cannot be reached ({type(exc).__name__}: {exc or 'connection closed'})"
