"""The generations in flight, which the engine can end all at once with one error (the server shutting down).

Each is ended where it waits for its next chunk, at once: not after its backend's next step, which on a busy CPU
can take seconds, and whatever the backend. Its consumer (a stream writer, a route collecting a whole answer) sees
the error as it would see a backend's, and ends its answer properly. The backend's stream is closed, which frees
the request's slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import aclosing

from localinfer.errors import LocalInferError
from localinfer.types import TokenStream

ErrorFactory = Callable[[], LocalInferError]


class _Generation:
    """One stream in flight: the task reading it, and whether that task waits for its next chunk now."""

    __slots__ = ("ended", "task", "waiting")

    def __init__(self) -> None:
        self.task: asyncio.Task[object] | None = None
        self.waiting = False
        self.ended = False


class InFlight:
    def __init__(self) -> None:
        self._generations: set[_Generation] = set()
        self._error: ErrorFactory | None = None

    async def stream(self, chunks: TokenStream) -> TokenStream:
        """``chunks`` as they come, until ``end``: from then on the error ``end`` was given is raised instead, where
        the reader waits or at its next read (``chunks`` is closed). A failure of ``chunks`` after ``end`` (the
        backend unloaded under it) is that error too."""
        generation = _Generation()
        self._generations.add(generation)
        try:
            async with aclosing(chunks):
                while True:
                    if self._error is not None:
                        raise self._error()
                    generation.task = asyncio.current_task()
                    generation.waiting = True
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        return
                    except asyncio.CancelledError:
                        if generation.ended and self._error is not None and _withdraw_cancel(generation.task):
                            raise self._error() from None  # our cancel alone: the reader goes on, with the error
                        raise
                    except LocalInferError as exc:
                        if self._error is not None:
                            raise self._error() from exc
                        raise
                    finally:
                        generation.waiting = False
                    yield chunk
        finally:
            self._generations.discard(generation)

    def end(self, error: ErrorFactory) -> None:
        """End every generation in flight, and any started later, with ``error()``: those waiting for a chunk now
        at once, the others at their next read."""
        self._error = error
        for generation in self._generations:
            if generation.waiting and not generation.ended and generation.task is not None:
                generation.ended = True
                generation.task.cancel()


def _withdraw_cancel(task: asyncio.Task[object] | None) -> bool:
    """Withdraw ``end``'s cancel request from ``task``; True when no other is pending (Python 3.10 does not count
    them: True)."""
    uncancel: Callable[[], int] | None = getattr(task, "uncancel", None)
    return uncancel is None or uncancel() == 0
