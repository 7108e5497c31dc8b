"""One message of a conversation: who wrote it, its Markdown, and for replies how fast it came."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

DRAW_EVERY_S = 0.2
"""How often a streaming reply is redrawn. Drawing Markdown per token costs the event loop's thread as much CPU as
decoding, and on a small machine that CPU is taken from the model's threads."""

_STATE_NOTES = {
    "stopped": "stopped",
    "interrupted": "interrupted: the app closed before the reply finished",
    "streaming": "",
    "complete": "",
}


def reply_stats(ttft_ms: float | None, tokens_per_second: float | None) -> str:
    parts = []
    if ttft_ms is not None:
        parts.append(f"first token {ttft_ms:.0f} ms")
    if tokens_per_second is not None:
        parts.append(f"{tokens_per_second:.1f} tok/s")
    return " · ".join(parts)


class MessageView(Vertical):
    """A user message or a reply. Replies stream in through ``stream`` and end with ``finish``."""

    def __init__(self, role: str, content: str, *, author: str, message_id: int | None = None) -> None:
        super().__init__(classes=f"message {role}")
        self.role = role
        self.content = content
        self.author = author
        self.message_id = message_id
        self._stream: MarkdownStream | None = None
        self._undrawn = ""  # streamed text not drawn yet
        self._drawn_at = 0.0

    def compose(self) -> ComposeResult:
        yield Static(self.author, classes="author")
        yield Markdown(self.content, classes="body")
        yield Static("", classes="stats")

    @property
    def body(self) -> Markdown:
        return self.query_one(".body", Markdown)

    def code_blocks(self) -> list[str]:
        """The fenced code blocks of the message, in order."""
        blocks: list[str] = []
        current: list[str] | None = None
        for line in self.content.splitlines():
            if line.lstrip().startswith("```"):
                if current is None:
                    current = []
                else:
                    blocks.append("\n".join(current))
                    current = None
            elif current is not None:
                current.append(line)
        return blocks

    async def append(self, text: str) -> None:
        """Add streamed text to the reply; it is drawn at most every ``DRAW_EVERY_S``."""
        self.content += text
        self._undrawn += text
        if time.monotonic() - self._drawn_at >= DRAW_EVERY_S:
            await self._draw()

    async def _draw(self) -> None:
        if not self._undrawn:
            return
        if self._stream is None:
            self._stream = Markdown.get_stream(self.body)
        await self._stream.write(self._undrawn)
        self._undrawn = ""
        self._drawn_at = time.monotonic()

    async def finish(
        self,
        *,
        state: str,
        ttft_ms: float | None = None,
        tokens_per_second: float | None = None,
        error: str | None = None,
    ) -> None:
        """Flush the stream and show how the reply went."""
        await self._draw()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.show_stats(state=state, ttft_ms=ttft_ms, tokens_per_second=tokens_per_second, error=error)

    def show_stats(
        self,
        *,
        state: str,
        ttft_ms: float | None = None,
        tokens_per_second: float | None = None,
        error: str | None = None,
    ) -> None:
        note = f"error: {error}" if error else _STATE_NOTES.get(state, state)
        text = " · ".join(part for part in (reply_stats(ttft_ms, tokens_per_second), note) if part)
        stats = self.query_one(".stats", Static)
        stats.update(text)
        stats.display = bool(text)
        self.set_class(state in ("stopped", "interrupted") or error is not None, "partial")
