"""What the screens use of the app that hosts them, as a protocol: screens reach the app through this (and
messages), never by importing ``LocalInferApp``, which imports the screens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from localinfer.app.tui.conversations import ConversationStore
    from localinfer.app.tui.tools.toolbox import Toolbox
    from localinfer.client.base import ClientStatus, InferenceClient


class ChatView(Protocol):
    @property
    def model(self) -> str | None: ...


class TuiHost(Protocol):
    """``LocalInferApp`` as its screens see it (see its constructor for what the fields mean)."""

    client: InferenceClient
    store: ConversationStore
    default_model: str | None
    export_dir: Path
    open_model: str | None
    last_status: ClientStatus | None
    clock: Callable[[], float]
    toolbox: Toolbox | None

    @property
    def chat_screen(self) -> ChatView: ...

    def refresh_status(self) -> object: ...

    def action_models(self) -> None: ...

    async def chat_with(self, model: str) -> None: ...
