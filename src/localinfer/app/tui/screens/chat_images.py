"""The chat screen's image part (``ChatScreen`` builds on it): images attached to the next message with ``/image
PATH`` or a path pasted or dropped into the prompt, shown as chips over it, refused in one line for a model that
does not see."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path

from textual import on
from textual.widgets import Static

from localinfer.app.tui.attachments import Attachment, AttachmentError, read_attachment
from localinfer.app.tui.screens.chat_tools import ToolChatScreen
from localinfer.app.tui.widgets.prompt import PromptInput
from localinfer.errors import LocalInferError


class ImageChatScreen(ToolChatScreen):
    """The chat screen's images (``ChatScreen`` builds on it)."""

    attached: list[Attachment]  # images to go with the next message

    @property
    @abstractmethod
    def model(self) -> str | None:
        """The conversation's model (``ChatScreen`` says)."""

    @on(PromptInput.AttachRequested)
    async def attach_requested(self, event: PromptInput.AttachRequested) -> None:
        await self.attach(event.path)

    async def attach(self, path: Path) -> None:
        """Attach the image at ``path`` to the next message, when it is one and the model sees; else say why in
        one line."""
        try:
            image = read_attachment(path)
        except AttachmentError as exc:
            self.notify(f"{exc.message}. {exc.hint}".strip(), title="not attached", severity="warning")
            return
        if self.model is not None and not await self._sees(self.model):
            return
        self.attached.append(image)
        self._show_attached()

    async def detach_all(self, *, quiet: bool = False) -> None:
        """Drop the images attached to the next message (``/image`` alone)."""
        if not self.attached and not quiet:
            self.notify("no image is attached: /image PATH attaches one", severity="warning")
        self.attached.clear()
        self._show_attached()

    def _show_attached(self) -> None:
        chips = self.query_one("#attachments", Static)
        chips.update("  ".join(a.chip for a in self.attached))
        chips.display = bool(self.attached)

    async def _sees(self, model: str) -> bool:
        """Whether ``model`` sees images; a model that does not is said in one line. A client that cannot list its
        models lets the image go: the server answers for it."""
        try:
            info = next((m for m in await self.li_app.client.models() if m.name == model), None)
        except LocalInferError:
            return True
        if info is None or "vision" in info.modalities:
            return True
        self.notify(
            f"{model} does not see images: it has no vision projector. Pick a model marked 'image' (Ctrl+O), or "
            "send the text alone (/image drops the attached)",
            severity="warning",
        )
        return False
