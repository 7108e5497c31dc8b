"""Turns a stream of token bytes into text a client can be sent: whole UTF-8 characters, stop strings cut.

Text that could still become the start of a stop string is held back until the next token settles it, so
a client never sees part of a stop string.
"""

from __future__ import annotations

import codecs


class TextStream:
    limited = False  # ended by a limit on the text (line_limits.py) rather than a stop string

    def __init__(self, stop: tuple[str, ...]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._pending = ""
        self.stopped = False
        self.stop_word: str | None = None  # the stop string that ended the text, once one did

    def push(self, data: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to send. Sets ``stopped`` (and ``stop_word``)
        on a stop string."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(data)
        if not self._stop:
            out, self._pending = self._pending, ""
            return out
        found = [(i, stop) for stop in self._stop if (i := self._pending.find(stop)) >= 0]
        if found:
            cut, self.stop_word = min(found)
            self.stopped = True
            out, self._pending = self._pending[:cut], ""
            return out
        keep = self._held_back_length()
        out = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return out

    def flush(self) -> str:
        """The text still held back, once generation has ended for another reason than a stop string."""
        if self.stopped:
            return ""
        out = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return out

    def _held_back_length(self) -> int:
        """The longest tail of the pending text that is a proper prefix of some stop string."""
        best = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(self._pending)), best, -1):
                if self._pending.endswith(stop[:n]):
                    best = n
                    break
        return best
