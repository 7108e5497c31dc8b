"""The hand-off from a backend's inference thread to the requester: a queue of chunks, ended by a finish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from localinfer.types import TokenChunk

ChunkQueue = asyncio.Queue[TokenChunk | BaseException]
"""What an inference thread puts for one request: chunks, the last with a finish reason, or the error to raise."""


async def relay(chunks: ChunkQueue) -> AsyncIterator[TokenChunk]:
    """Yield ``chunks`` until the one with a finish reason; an exception put in the queue is raised here."""
    while True:
        item = await chunks.get()
        if isinstance(item, BaseException):
            raise item
        yield item
        if item.finish_reason is not None:
            return
