"""Progress events: pull, convert, quantize and load all report through one small protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ProgressEvent:
    """``status`` says what is happening; ``completed``/``total`` count ``unit`` (bytes, else steps such as a
    model's layers) when known."""

    status: str
    total: int | None = None
    completed: int | None = None
    digest: str | None = None
    unit: str = "bytes"


class ProgressSink(Protocol):
    def __call__(self, event: ProgressEvent) -> None: ...


def ignore_progress(event: ProgressEvent) -> None:
    """A sink that drops every event (quiet mode)."""
