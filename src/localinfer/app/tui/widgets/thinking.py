"""A reply's thinking: a one-line summary above the answer, and the thinking itself, dim, when expanded."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static


def thinking_summary(*, thinking: bool, seconds: float | None, tokens: int | None, expanded: bool) -> str:
    """The summary line: ``▶ Thought for 1.2 s · 48 tokens`` (``▼`` when expanded), or ``Thinking…`` while the
    model still thinks. A part not known (an older history) is left out."""
    parts = ["Thinking…" if thinking else (f"Thought for {seconds:.1f} s" if seconds is not None else "Thought")]
    if tokens is not None:
        parts.append(f"{tokens} token" + ("" if tokens == 1 else "s"))
    return ("▼ " if expanded else "▶ ") + " · ".join(parts)


class ThinkingBlock(Vertical):
    """The thinking of one reply. Expanded while the model thinks; once it answers it collapses, unless whoever
    reads it toggled it (a click on the summary, or the chat's key) in the meantime."""

    expanded: reactive[bool] = reactive(True)

    def __init__(
        self,
        text: str = "",
        *,
        thinking: bool = True,
        seconds: float | None = None,
        tokens: int | None = None,
        expanded: bool = True,
    ) -> None:
        super().__init__(classes="thinking")
        self.text = text
        self.thinking = thinking
        self.seconds = seconds
        self.tokens = tokens
        self._toggled = False
        self.set_reactive(ThinkingBlock.expanded, expanded)

    def compose(self) -> ComposeResult:
        yield Static(self._summary(), classes="thinking-summary", markup=False)
        yield Static(self.text.strip(), classes="thinking-text", markup=False)

    def on_mount(self) -> None:
        self.set_class(not self.expanded, "collapsed")

    def _summary(self) -> str:
        return thinking_summary(
            thinking=self.thinking, seconds=self.seconds, tokens=self.tokens, expanded=self.expanded
        )

    def _show_summary(self) -> None:
        if self.is_mounted:
            self.query_one(".thinking-summary", Static).update(self._summary())

    def watch_expanded(self, expanded: bool) -> None:
        self.set_class(not expanded, "collapsed")
        self._show_summary()

    def show(self, text: str, tokens: int) -> None:
        """Draw the thinking so far (``text``, in ``tokens`` tokens)."""
        self.text, self.tokens = text, tokens
        if self.is_mounted:
            self.query_one(".thinking-text", Static).update(text.strip())
        self._show_summary()

    def thought(self, seconds: float | None, tokens: int | None, *, collapse: bool) -> None:
        """The thinking ended after ``seconds``, in ``tokens`` tokens (None: keep the count so far); collapse it
        (the answer started) unless the reader toggled it already."""
        self.thinking, self.seconds = False, seconds
        if tokens is not None:
            self.tokens = tokens
        if collapse and not self._toggled:
            self.expanded = False
        self._show_summary()

    def toggle(self) -> None:
        self._toggled = True
        self.expanded = not self.expanded

    def on_click(self, event: events.Click) -> None:
        if event.widget is not None and event.widget.has_class("thinking-summary"):
            event.stop()
            self.toggle()
