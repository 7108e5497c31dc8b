"""How many of a reply's tokens a reasoning model thought in (``Usage.reasoning_tokens``), for the splitters of
engine/thinking_split.py and engine/harmony.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from localinfer.types import TokenChunk, Usage


class ThoughtCounter:
    """Counts the tokens a reply thought in: those of the chunks whose text starts inside the thinking (its
    markers, written or forced by a budget, are not thinking: a budget of N counts N)."""

    def __init__(self, start: int = 0) -> None:
        self._position = start
        self._chunks: list[tuple[int, int]] = []  # (where its text starts, how many tokens)

    def add(self, chunk: TokenChunk) -> None:
        self._chunks.append((self._position, len(chunk.tokens) or (1 if chunk.text else 0)))
        self._position += len(chunk.text)

    def counted(self, usage: Usage | None, spans: Sequence[tuple[int, int | None]]) -> Usage | None:
        """``usage`` with its ``reasoning_tokens``: the tokens of the chunks that started inside ``spans``."""
        if usage is None:
            return None
        thought = sum(n for at, n in self._chunks if any(_within(at, span) for span in spans))
        return dataclasses.replace(usage, reasoning_tokens=min(thought, usage.completion_tokens))


def _within(at: int, span: tuple[int, int | None]) -> bool:
    start, end = span
    return start <= at and (end is None or at < end)
