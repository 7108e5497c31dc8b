"""What every dialect does with a token stream: start it before answering, gather it, or write it as NDJSON."""

from __future__ import annotations

import json
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from localinfer.types import TokenChunk, TokenLogprob, TokenStream


async def primed(stream: TokenStream) -> TokenStream:
    """Run ``stream`` up to its first chunk now, so that a bad request fails before any byte is sent (as an HTTP
    status in the dialect's error shape, not as a stream's last event)."""
    first = await anext(stream)

    async def replay() -> TokenStream:
        try:
            yield first
            async for chunk in stream:
                yield chunk
        finally:
            await stream.aclose()

    return replay()


@dataclass
class Collected:
    """A whole generation gathered from its chunks: the text, and the last chunk (finish reason, usage, timings)."""

    text: str = ""
    last: TokenChunk = field(default_factory=lambda: TokenChunk(""))
    logprobs: list[TokenLogprob] = field(default_factory=list)  # every token's, when they were asked for
    tokens: list[int] = field(default_factory=list)  # every token's id, where the backend says them
    reasoning: str = ""  # a reasoning model's thinking, apart from ``text``
    _parts: list[str] = field(default_factory=list)
    _thinking: list[str] = field(default_factory=list)

    def add(self, chunk: TokenChunk) -> None:
        self._parts.append(chunk.text)
        self._thinking.append(chunk.reasoning)
        self.logprobs.extend(chunk.logprobs)
        self.tokens.extend(chunk.tokens)
        self.last = chunk

    def done(self) -> Collected:
        """The generation whole, once every chunk was added."""
        self.text, self.reasoning = "".join(self._parts), "".join(self._thinking)
        return self


async def collect(chunks: TokenStream) -> Collected:
    result = Collected()
    async with aclosing(chunks):
        async for chunk in chunks:
            result.add(chunk)
    return result.done()


def ndjson_line(body: dict[str, Any]) -> str:
    """One NDJSON line, compact, as Ollama writes it."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n"
