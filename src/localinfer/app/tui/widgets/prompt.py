"""The multi-line prompt: Enter sends, Shift+Enter or Ctrl+J starts a new line; the path of an image pasted or
dropped into it attaches the image instead of typing the path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from localinfer.app.tui.attachments import pasted_path

NEWLINE_KEYS = ("shift+enter", "ctrl+j")


class PromptInput(TextArea):
    """A TextArea that posts ``PromptSubmitted`` on Enter instead of inserting a line break."""

    @dataclass
    class PromptSubmitted(Message):
        text: str

    @dataclass
    class AttachRequested(Message):
        """An image's path was pasted or dropped into the prompt."""

        path: Path

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus")
        self.border_title = "Message (Enter sends, Ctrl+J new line)"

    async def _on_paste(self, event: events.Paste) -> None:
        """An image's path attaches the image; other text is left to TextArea's own handler (Textual calls it after
        this one, down the class tree, unless the default is prevented)."""
        path = pasted_path(event.text)
        if path is None:
            return
        event.stop()
        event.prevent_default()
        self.post_message(self.AttachRequested(path))

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text.strip()
            if text:
                self.post_message(self.PromptSubmitted(text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)
