"""llama-server's two limits for editor completions, on the text as it streams out (``n_indent``,
``t_max_predict_ms``; tools/server/server-context.cpp, ``process_token``).

- ``n_indent``: every line after the first must be indented by at least this many spaces or tabs. The first line
  that is not (an empty line included) ends the text; its indentation is kept and the rest of it cut. An editor
  sends the cursor line's indentation, so a completion stops where the block it is in ends.
- ``t_max_predict_ms``: once generating has taken longer than this, the next line end ends the text (the line is
  kept whole), so a slow model still gives whole lines in time.

Either ends the generation as a limit (``finish_reason`` ``length``, llama-server's ``stop_type`` ``limit``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from localinfer.backends.text_stream import TextStream
from localinfer.types import GenerationOptions


class LimitedTextStream(TextStream):
    """A TextStream that also ends the text at llama-server's indentation and time limits, setting ``stopped``
    and ``limited``. The leading whitespace of a line after the first is held back until the line shows whether
    it is indented enough."""

    def __init__(
        self,
        stop: tuple[str, ...],
        *,
        n_indent: int = 0,
        t_max_predict_ms: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(stop)
        self._n_indent = n_indent
        self._t_max = t_max_predict_ms / 1000.0
        self._clock = clock
        self._started: float | None = None
        self._at_line_start = False  # in the leading whitespace of a line after the first
        self._indent = ""  # that whitespace, held back

    def push(self, data: bytes) -> str:
        if self._started is None:
            self._started = self._clock()
        return self._limit(super().push(data))

    def flush(self) -> str:
        held, self._indent = self._indent, ""
        if self.limited:
            return ""
        return held + self._limit(super().flush(), final=True)

    def _limit(self, text: str, *, final: bool = False) -> str:
        """The part of ``text`` (the text now safe to send) that comes before a limit."""
        if self.limited:
            return ""
        out = self._cut_at_indent(text) if self._n_indent > 0 else text
        if self.limited:
            return out
        late = self._started is not None and self._clock() - self._started > self._t_max
        if not final and self._t_max > 0 and "\n" in text and late:
            self._end()
        return out

    def _cut_at_indent(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            if self._at_line_start:
                if ch in " \t":
                    self._indent += ch
                    continue
                indent, self._indent = self._indent, ""
                out.append(indent)
                if len(indent) < self._n_indent:  # a character (or the line's end) after too little indentation
                    self._end()
                    return "".join(out)
                self._at_line_start = ch == "\n"
                out.append(ch)
                continue
            out.append(ch)
            if ch == "\n":
                self._at_line_start = True
        return "".join(out)

    def _end(self) -> None:
        self.stopped = True
        self.limited = True


def text_stream_for(options: GenerationOptions) -> TextStream:
    """The text stream a generation with ``options`` needs: with llama-server's line limits when it asks for any."""
    if options.n_indent > 0 or options.t_max_predict_ms > 0:
        return LimitedTextStream(options.stop, n_indent=options.n_indent, t_max_predict_ms=options.t_max_predict_ms)
    return TextStream(options.stop)
