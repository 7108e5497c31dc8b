"""One message of a conversation: who wrote it, a reasoning model's thinking, its Markdown, and for replies how fast
it came."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from localinfer.app.tui.widgets.thinking import ThinkingBlock

DRAW_EVERY_S = 0.2
"""How often a streaming reply is redrawn. Drawing Markdown per token costs the event loop's thread as much CPU as
decoding, and on a small machine that CPU is taken from the model's threads. Text that came since is drawn when
this much time has passed, even if nothing more comes."""

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
    """A user message or a reply. Replies stream in through ``append`` and end with ``finish``; a reasoning model's
    thinking streams into a ``ThinkingBlock`` above the answer, which collapses once the answer starts
    (``thought``)."""

    def __init__(
        self,
        role: str,
        content: str,
        *,
        author: str,
        message_id: int | None = None,
        reasoning: str = "",
        thinking_ms: float | None = None,
        thinking_tokens: int | None = None,
        chips: tuple[str, ...] = (),
    ) -> None:
        """``reasoning`` (with how long and in how many tokens) is a stored reply's thinking: shown collapsed, or
        expanded when the reply has no answer; ``chips`` are a user message's attached images, shown above it."""
        super().__init__(classes=f"message {role}")
        self.role = role
        self.content = content
        self.author = author
        self.message_id = message_id
        self.reasoning = reasoning
        self.chips = chips
        self.thinking_tokens = thinking_tokens or 0  # the pieces of thinking streamed so far, or the stored count
        self._thinking_ms = thinking_ms
        self._stream: MarkdownStream | None = None
        self._undrawn = ""  # streamed text not drawn yet
        self._thinking_undrawn = False  # streamed thinking not drawn yet
        self._drawn_at = 0.0
        self._due: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(self.author, classes="author")
        if self.chips:
            yield Static("  ".join(self.chips), classes="chips")
        if self.reasoning:
            seconds = self._thinking_ms / 1000 if self._thinking_ms is not None else None
            tokens = self.thinking_tokens or None
            yield ThinkingBlock(
                self.reasoning, thinking=False, seconds=seconds, tokens=tokens, expanded=not self.content.strip()
            )
        yield Markdown(self.content, classes="body")
        yield Static("", classes="stats")

    @property
    def thinking_block(self) -> ThinkingBlock | None:
        blocks = self.query(ThinkingBlock)
        return blocks.first() if blocks else None

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

    async def append(self, text: str, reasoning: str = "") -> None:
        """Add streamed answer ``text`` and thinking (``reasoning``, a piece of it a token) to the reply; they are
        drawn at most every ``DRAW_EVERY_S``."""
        if reasoning:
            if not self.reasoning:
                await self.mount(ThinkingBlock(), after=self.query_one(".author"))
            self.reasoning += reasoning
            self.thinking_tokens += 1
            self._thinking_undrawn = True
        self.content += text
        self._undrawn += text
        wait = DRAW_EVERY_S - (time.monotonic() - self._drawn_at)
        if wait <= 0:
            await self._draw()
        elif self._due is None:
            self._due = self.set_timer(wait, self._draw)

    async def _draw(self) -> None:
        if self._due is not None:
            self._due.stop()
            self._due = None
        block = self.thinking_block
        if self._thinking_undrawn and block is not None:
            block.show(self.reasoning, self.thinking_tokens)
            self._thinking_undrawn = False
        if self._undrawn:
            if self._stream is None:
                self._stream = Markdown.get_stream(self.body)
            await self._stream.write(self._undrawn)
            self._undrawn = ""
        self._drawn_at = time.monotonic()

    @property
    def drawn(self) -> bool:
        """All the text streamed so far is on the screen."""
        return not self._undrawn and not self._thinking_undrawn

    async def thought(self, thinking_ms: float) -> None:
        """The model ended its thinking after ``thinking_ms`` and started to answer: collapse the thinking."""
        self._thinking_ms = thinking_ms
        await self._draw()
        block = self.thinking_block
        if block is not None:
            block.thought(thinking_ms / 1000, self.thinking_tokens, collapse=True)

    async def finish(
        self,
        *,
        state: str,
        ttft_ms: float | None = None,
        tokens_per_second: float | None = None,
        error: str | None = None,
        thinking_ms: float | None = None,
        thinking_tokens: int | None = None,
    ) -> None:
        """Flush the stream and show how the reply went: how long the model thought (``thinking_ms``, when it did
        not get to answer) and in how many tokens (``thinking_tokens``: the engine's count, when known)."""
        await self._draw()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        if thinking_tokens:
            self.thinking_tokens = thinking_tokens
        block = self.thinking_block
        if block is not None:
            if block.thinking:  # no answer came: the thinking is all there is, and stays open
                self._thinking_ms = thinking_ms
            seconds = self._thinking_ms / 1000 if self._thinking_ms is not None else None
            block.thought(seconds, self.thinking_tokens, collapse=False)
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
