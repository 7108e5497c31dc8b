"""The progress line every long-running command draws on stderr: a redrawn line with a bar, the speed and the
time left on a terminal, one line per status otherwise."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from localinfer.progress import ProgressEvent

_BAR_WIDTH = 24
_MB = 1_000_000


class ProgressLine:
    """Renders progress events on one stream: a redrawn line on a terminal, one line per status otherwise.

    On a terminal a byte count shows a bar, the speed and the time left.
    """

    def __init__(self, stream: TextIO, *, min_interval: float = 0.1) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.min_interval = min_interval
        self._last_status: str | None = None
        self._last_draw = 0.0
        self._open_line = False
        self._rate = _Rate()

    def __call__(self, event: ProgressEvent) -> None:
        if event.status != self._last_status:
            self._rate = _Rate()
        self._rate.add(event.completed)
        if not self.tty:
            if event.status != self._last_status:
                self.stream.write(event.status + "\n")
                self.stream.flush()
            self._last_status = event.status
            return
        now = time.monotonic()
        finished = event.total is not None and event.completed == event.total
        if event.status == self._last_status and not finished and now - self._last_draw < self.min_interval:
            return
        if event.status != self._last_status and self._open_line:
            self.stream.write("\n")
        self.stream.write("\r\x1b[K" + format_event(event, self._rate.per_second()))
        self.stream.flush()
        self._open_line = True
        self._last_status = event.status
        self._last_draw = now

    def close(self) -> None:
        """End the redrawn line, if one is open."""
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False


class _Rate:
    """Bytes per second over the last few seconds of one status's events."""

    WINDOW = 3.0

    def __init__(self) -> None:
        self._samples: list[tuple[float, int]] = []

    def add(self, completed: int | None) -> None:
        if completed is None:
            return
        now = time.monotonic()
        self._samples.append((now, completed))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.WINDOW:
            self._samples.pop(0)

    def per_second(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else None


def format_event(event: ProgressEvent, rate: float | None = None) -> str:
    """``status  12.3/92.9 MB [###-----]  13%  8.1 MB/s  10s left`` when the total is known, else less;
    ``status  12/30 layers  40%`` for steps of another unit."""
    if event.completed is None:
        return event.status
    if event.unit != "bytes":
        if not event.total:
            return f"{event.status}  {event.completed} {event.unit}"
        share = min(max(event.completed / event.total, 0.0), 1.0)
        return f"{event.status}  {event.completed}/{event.total} {event.unit} {share:4.0%}"
    done = f"{event.completed / _MB:.1f}"
    if not event.total:
        return f"{event.status}  {done} MB"
    fraction = min(max(event.completed / event.total, 0.0), 1.0)
    filled = round(fraction * _BAR_WIDTH)
    bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
    line = f"{event.status}  {done}/{event.total / _MB:.1f} MB [{bar}] {fraction:4.0%}"
    if rate and event.completed < event.total:
        left = (event.total - event.completed) / rate
        line += f"  {rate / _MB:.1f} MB/s  {_duration(left)} left"
    return line


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
