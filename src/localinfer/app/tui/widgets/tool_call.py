"""One tool call in the chat: what the model asked to run, its state, and its result folded below (a click on the
summary unfolds it); a result cut before it went to the model says so."""

from __future__ import annotations

import json

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

_STATES = {
    "asking": "waiting for your approval",
    "running": "running… (Ctrl+C stops it)",
    "ok": "done",
    "error": "the tool reported an error",
    "denied": "denied",
    "stopped": "stopped",
    "failed": "failed",
}
SHOWN_LINES = 200  # an unfolded result shows this many lines at most (the model got up to tool_output_max)


def call_line(key: str, arguments: dict[str, object]) -> str:
    shown = json.dumps(arguments, ensure_ascii=False)
    return f"⚙ {key}({shown if len(shown) <= 200 else shown[:199] + '…'})"


class ToolCallView(Vertical):
    """A call, from asked to ended (``end``). Folded until its summary is clicked (or ``toggle``)."""

    def __init__(self, key: str, arguments: dict[str, object], *, state: str = "asking") -> None:
        super().__init__(classes="tool-call")
        self.key = key
        self.arguments = arguments
        self.state = state
        self.output = ""
        self.cut = 0
        self.expanded = False

    def compose(self) -> ComposeResult:
        yield Static(call_line(self.key, self.arguments), classes="tool-call-line", markup=False)
        yield Static(self._summary(), classes="tool-summary", markup=False)
        yield Static(self._shown(), classes="tool-output", markup=False)

    def on_mount(self) -> None:
        self.set_class(not self.expanded, "folded")

    def _summary(self) -> str:
        state = _STATES.get(self.state, self.state)
        if self.state in ("asking", "running"):
            return state
        size = f"{len(self.output)} characters" + (f", {self.cut} more cut" if self.cut else "")
        return ("▼ " if self.expanded else "▶ ") + f"{state} · {size}"

    def _shown(self) -> str:
        lines = self.output.splitlines()
        if len(lines) <= SHOWN_LINES:
            return self.output
        return "\n".join([*lines[:SHOWN_LINES], f"… {len(lines) - SHOWN_LINES} more lines"])

    def set_state(self, state: str) -> None:
        self.state = state
        self._redraw()

    def end(self, state: str, output: str, cut: int) -> None:
        """The call ended as ``state``; ``output`` is what the model got (``cut`` characters were left out)."""
        self.state, self.output, self.cut = state, output, cut
        self._redraw()

    def toggle(self) -> None:
        self.expanded = not self.expanded
        self._redraw()

    def _redraw(self) -> None:
        if not self.is_mounted:
            return
        self.query_one(".tool-call-line", Static).update(call_line(self.key, self.arguments))
        self.query_one(".tool-summary", Static).update(self._summary())
        self.query_one(".tool-output", Static).update(self._shown())
        self.set_class(not self.expanded, "folded")

    def on_click(self, event: events.Click) -> None:
        if self.state not in ("asking", "running"):
            self.toggle()
