"""The status line: where the engine runs, the model and how it runs, memory, the last reply's speed."""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static

from localinfer.client.base import ClientStatus

_GB = 1_000_000_000


def _gb(n: int) -> str:
    return f"{n / _GB:.1f} GB"


def describe(status: ClientStatus | None, *, model: str | None, activity: str) -> str:
    """One line, most important first, so a narrow terminal cuts the least useful part."""
    parts: list[str] = []
    if activity:
        parts.append(activity)
    loaded = next((m for m in status.loaded if m.name == model), None) if status else None
    if model:
        parts.append(model if loaded or status is None else f"{model} (not loaded)")
    if loaded is not None:
        hardware = f"{loaded.threads} threads" if loaded.threads else "CPU"
        if loaded.gpu_layers:
            hardware += f", {loaded.gpu_layers} GPU layers"
        slots = f"{loaded.slots} slot" + ("s" if loaded.slots != 1 else "")
        parts.append(f"{loaded.backend}: {hardware}, ctx {loaded.context_length}, {slots}")
    if status is not None:
        if status.memory_used is not None and status.memory_total is not None:
            parts.append(f"mem {_gb(status.memory_used)} / {_gb(status.memory_total)}")
        parts.append(f"serving {status.serving}" if status.serving else status.where)
    return " │ ".join(parts)


class StatusBar(Static):
    """Renders what the app tells it; the app refreshes ``status``, screens set ``model`` and ``activity``."""

    status: reactive[ClientStatus | None] = reactive(None)
    model: reactive[str | None] = reactive(None)
    activity: reactive[str] = reactive("")

    def render(self) -> str:
        return describe(self.status, model=self.model, activity=self.activity)
