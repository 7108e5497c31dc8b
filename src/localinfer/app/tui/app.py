"""The localinfer TUI: chat and model manager. It only wires what it is given: a client, a conversation store,
the default model and where exports go. Screens own the workers; widgets render and post messages."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from localinfer.app.tui.conversations import ConversationStore
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.screens.models import ModelsScreen
from localinfer.app.tui.tools.toolbox import Toolbox
from localinfer.app.tui.widgets.status import StatusBar
from localinfer.client.base import ClientStatus, InferenceClient
from localinfer.errors import LocalInferError

STATUS_EVERY_S = 2.0


class LocalInferApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "localinfer"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+t", "toggle_theme", "Light/dark"),
    ]

    def __init__(
        self,
        client: InferenceClient,
        store: ConversationStore,
        *,
        default_model: str | None,
        export_dir: Path,
        poll_status: bool = True,
        background: Callable[[], Awaitable[None]] | None = None,
        open_model: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
        toolbox: Toolbox | None = None,
    ) -> None:
        """``default_model`` is the one new conversations use; ``open_model``, when given, opens a new
        conversation with that model instead of the latest one. ``background`` runs for as long as the app does
        (the API server of ``--serve``). ``clock`` (seconds, monotonic) times the replies: their first token and
        how long a reasoning model thought. ``toolbox``: the MCP servers the chat may use (connected when the
        chat opens, disconnected when the app closes)."""
        super().__init__()
        self.client = client
        self.store = store
        self.default_model = default_model
        self.export_dir = export_dir
        self.poll_status = poll_status
        self.last_status: ClientStatus | None = None
        self.background = background
        self.open_model = open_model
        self.clock = clock
        self.toolbox = toolbox

    async def on_mount(self) -> None:
        self.theme = "textual-dark"
        if self.background is not None:
            self.run_worker(self.background(), name="api server", group="background", exit_on_error=False)
        chat = ChatScreen()
        await self.push_screen(chat)
        if self.poll_status:
            self.set_interval(STATUS_EVERY_S, self.refresh_status)
            self.refresh_status()
        await self._lead_to_a_model()

    async def _lead_to_a_model(self) -> None:
        """With the conversation's model missing, chat with the last used model still here, or the only one; with
        none, open the models screen, which offers the starter."""
        try:
            names = {m.name for m in await self.client.models()}
        except LocalInferError as exc:
            self.notify(f"{exc.message}. {exc.hint}".strip(), title="cannot list the models", severity="error")
            return
        chat = self.chat_screen
        if chat.model is not None and chat.model in names:
            return
        fallback = self._last_used_model(names)
        if fallback is not None:  # a model is here: chat with it rather than open the pull field
            if chat.model is not None:
                self.notify(f"{chat.model} is not here: chatting with {fallback}", severity="warning")
            await self.chat_with(fallback)
            return
        if chat.model is not None:
            self.notify(f"{chat.model} is not here: pick or pull a model", severity="warning")
        await self.push_screen(ModelsScreen())

    def _last_used_model(self, names: set[str]) -> str | None:
        """The model of the latest conversation that is still here, else the only model here, else None."""
        for conversation in self.store.list_conversations():
            if conversation.model in names:
                return conversation.model
        return next(iter(names)) if len(names) == 1 else None

    @property
    def chat_screen(self) -> ChatScreen:
        return next(s for s in self.screen_stack if isinstance(s, ChatScreen))

    @work(exclusive=True, group="status")
    async def refresh_status(self) -> None:
        try:
            self.last_status = await self.client.status()
        except LocalInferError:
            self.last_status = None
        for bar in self.query_status_bars():
            bar.status = self.last_status

    def query_status_bars(self) -> list[StatusBar]:
        return [bar for screen in self.screen_stack for bar in screen.query(StatusBar)]

    async def chat_with(self, model: str) -> None:
        """Go back to the chat and use ``model`` in the open conversation."""
        while not isinstance(self.screen, ChatScreen):
            self.pop_screen()
        await self.chat_screen.use_model(model)

    def action_models(self) -> None:
        if not isinstance(self.screen, ModelsScreen):
            self.push_screen(ModelsScreen())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The command palette lists every binding of the screen and the app, then Textual's own commands."""
        seen = set()
        for binding in [*screen.BINDINGS, *self.BINDINGS]:
            if not isinstance(binding, Binding) or binding.action in seen or binding.action == "command_palette":
                continue
            seen.add(binding.action)
            key = binding.key.split(",")[0]
            yield SystemCommand(
                f"{binding.description} ({key})",
                f"the {key} key",
                lambda action=binding.action, target=screen: self.call_later(target.run_action, action),
            )
        yield from super().get_system_commands(screen)

    async def on_unmount(self) -> None:
        if self.toolbox is not None:
            await self.toolbox.hub.close()
        await self.client.close()
        self.store.close()
