"""Work done for a client stops when the client hangs up, even before the first byte of the answer.

Starlette notices a disconnect only while a streaming response is being sent. A request still waiting for a slot,
or a non-streamed one being generated, would otherwise hold its place in the queue or its slot until the whole
answer was made for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

T = TypeVar("T")

# nginx's code for "the client closed the request": it is logged, never seen by the gone client.
CLIENT_CLOSED_REQUEST = 499


class ClientDisconnected(Exception):
    """The client hung up before its answer was ready; the work for it was cancelled."""


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, or ClientDisconnected once the client hangs up first (``work`` is then cancelled, so a
    generation it started frees its place in the queue or its slot)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientDisconnected
    finally:
        for pending in (task, watcher):
            pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _disconnect(request: Request) -> None:
    """Returns when the ASGI server says the client is gone (the body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        continue


def client_disconnected_response() -> Response:
    return Response(status_code=CLIENT_CLOSED_REQUEST)
