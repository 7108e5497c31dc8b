"""The chat screen: the conversation list, the messages, the prompt; it owns the generation worker."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import ClassVar, cast

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, ListView, Static

from localinfer.app.tui.attachments import Attachment, image_command
from localinfer.app.tui.conversations import Conversation, MessageState, StoredMessage
from localinfer.app.tui.host import TuiHost
from localinfer.app.tui.replies import ReplyTiming, chat_request
from localinfer.app.tui.screens.chat_images import ImageChatScreen
from localinfer.app.tui.screens.chat_tools import shown_messages, tool_view
from localinfer.app.tui.screens.dialogs import ConfirmScreen, SettingsScreen, TextInputScreen
from localinfer.app.tui.widgets.conversation_list import ConversationItem, ConversationList
from localinfer.app.tui.widgets.message import MessageView
from localinfer.app.tui.widgets.prompt import PromptInput
from localinfer.app.tui.widgets.status import StatusBar
from localinfer.errors import LocalInferError
from localinfer.types import ChatRequest

SAVE_EVERY_S = 0.5  # how often a streaming reply is written to the store, so a crash keeps most of it


class ChatScreen(ImageChatScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+n", "new_conversation", "New chat", priority=True),
        Binding("ctrl+o", "models", "Models", priority=True),
        Binding("ctrl+r", "toggle_thinking", "Thinking", priority=True),  # shown once a reply has thinking
        Binding("f2", "settings", "Settings"),
        Binding("f3", "retry", "Retry"),
        Binding("f4", "edit_last", "Edit last"),
        Binding("f5", "copy_reply", "Copy reply"),
        Binding("f6", "copy_code", "Copy code"),
        Binding("f7", "rename", "Rename"),
        Binding("f8", "export", "Export"),
        Binding("ctrl+delete,f9", "delete_conversation", "Delete chat"),
    ]

    def __init__(self) -> None:
        super().__init__(id="chat-screen")
        self.conversation: Conversation | None = None
        self._stopping = False
        self.attached: list[Attachment] = []  # images to go with the next message, shown as chips over the prompt

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The thinking's key is offered only where a reply has thinking."""
        if action == "toggle_thinking":
            return any(v.thinking_block is not None for v in self.query(MessageView))
        return super().check_action(action, parameters)

    @property
    def li_app(self) -> TuiHost:
        return cast("TuiHost", self.app)

    def compose(self) -> ComposeResult:
        with Horizontal(id="chat-body"):
            yield ConversationList(id="conversation-list")
            with Vertical(id="chat-main"):
                yield VerticalScroll(id="messages")
                yield Static("", id="attachments")
                yield PromptInput(id="prompt")
        yield StatusBar(id="status-bar")
        yield Footer()

    # --- lifecycle -------------------------------------------------------------------------------------

    async def on_mount(self) -> None:
        store = self.li_app.store
        conversations = store.list_conversations()
        if self.li_app.open_model is not None:  # 'localinfer --model M': a new conversation with M
            conversation = store.create(model=self.li_app.open_model)
        else:
            conversation = conversations[0] if conversations else store.create(model=self.li_app.default_model)
        await self.open_conversation(conversation)
        self.query_one(PromptInput).focus()
        self.run_worker(self.connect_servers(), name="mcp servers", group="mcp", exit_on_error=False)

    @property
    def model(self) -> str | None:
        return self.conversation.model if self.conversation else None

    async def open_conversation(self, conversation: Conversation) -> None:
        self.conversation = conversation
        await self.refresh_list()
        log = self.query_one("#messages", VerticalScroll)
        await log.remove_children()
        messages = shown_messages(self.li_app.store.messages(conversation.id))
        attached = self.li_app.store.attachments(conversation.id)
        views = [tool_view(m) if m.role == "tool" else self._view(m, attached.get(m.id, ())) for m in messages]
        await log.mount_all(views)
        for view, message in zip(views, messages, strict=True):
            if message.role == "assistant" and isinstance(view, MessageView):
                view.show_stats(
                    state=message.state,
                    ttft_ms=message.ttft_ms,
                    tokens_per_second=message.tokens_per_second,
                    error=message.error,
                )
        log.scroll_end(animate=False)
        log.anchor()
        self.refresh_bindings()
        self.query_one(StatusBar).model = conversation.model
        self.app.sub_title = conversation.title
        if conversation.model:
            self.load_model(conversation.model, conversation.settings.context_length)

    async def refresh_list(self) -> None:
        current = self.conversation.id if self.conversation else None
        await self.query_one(ConversationList).show(self.li_app.store.list_conversations(), current=current)

    def _view(self, message: StoredMessage, attachments: tuple[Attachment, ...] = ()) -> MessageView:
        author = "You" if message.role == "user" else (message.model or "assistant")
        return MessageView(
            message.role,
            message.content,
            author=author,
            chips=tuple(a.chip for a in attachments),
            message_id=message.id,
            reasoning=message.reasoning,
            thinking_ms=message.thinking_ms,
            thinking_tokens=message.thinking_tokens,
        )

    @on(ListView.Selected, "#conversation-list")
    async def conversation_selected(self, event: ListView.Selected) -> None:
        if isinstance(event.item, ConversationItem) and event.item.conversation.id != getattr(
            self.conversation, "id", None
        ):
            if self.generating:
                self.notify("stop the reply first (Esc)", severity="warning")
                return
            await self.open_conversation(self.li_app.store.get(event.item.conversation.id))
            self.query_one(PromptInput).focus()

    # --- model -----------------------------------------------------------------------------------------

    @work(exclusive=True, group="load")
    async def load_model(self, model: str, context_length: int | None) -> None:
        status = self.query_one(StatusBar)
        status.activity = f"loading {model}…"
        try:
            await self.li_app.client.load(model, context_length=context_length)
        except LocalInferError as exc:
            self.notify(f"{exc.message}. {exc.hint}".strip(), title="could not load the model", severity="error")
        finally:
            status.activity = ""
            self.li_app.refresh_status()

    async def use_model(self, model: str) -> None:
        """Chat with ``model`` from now on in this conversation (the models screen calls this)."""
        if self.conversation is None:
            return
        self.conversation = self.li_app.store.set_model(self.conversation.id, model)
        self.query_one(StatusBar).model = model
        self.load_model(model, self.conversation.settings.context_length)

    # --- sending ---------------------------------------------------------------------------------------

    @property
    def generating(self) -> bool:
        return any(w.group == "generation" and w.is_running for w in self.workers)

    @on(PromptInput.PromptSubmitted)
    async def prompt_submitted(self, event: PromptInput.PromptSubmitted) -> None:
        if self.conversation is None or await self.tool_command(event.text):
            return
        command = image_command(event.text)
        if command is not None:
            self.query_one(PromptInput).clear()
            await (self.attach(Path(command)) if command else self.detach_all())
            return
        if self.generating:
            self.notify("a reply is still coming: Esc stops it", severity="warning")
            return
        if not self.conversation.model:
            self.notify("pick a model first (Ctrl+O)", severity="warning")
            self.action_models()
            return
        images = tuple(self.attached)
        if images and not await self._sees(self.conversation.model):
            return
        self.query_one(PromptInput).clear()
        store = self.li_app.store
        message = store.add_message(self.conversation.id, "user", event.text, attachments=images)
        await self.detach_all(quiet=True)
        await self.query_one("#messages", VerticalScroll).mount(self._view(message, images))
        await self._reply()

    async def _reply(self) -> None:
        assert self.conversation is not None
        store = self.li_app.store
        conversation = self.conversation = store.get(self.conversation.id)
        history = store.messages(conversation.id)
        attachments = store.attachments(conversation.id)
        reply = store.add_message(conversation.id, "assistant", "", state="streaming", model=conversation.model)
        view = self._view(reply)
        log = self.query_one("#messages", VerticalScroll)
        await log.mount(view)
        log.anchor()
        await self.refresh_list()
        assert conversation.model is not None
        request = chat_request(conversation.model, conversation.settings, history, attachments)
        (self.generate_with_tools if self.uses_tools() else self.generate)(request, reply, view)

    @work(exclusive=True, group="generation")
    async def generate(self, request: ChatRequest, reply: StoredMessage, view: MessageView) -> None:
        """Stream the reply into ``view`` and the store. Esc ends it as ``stopped``; closing the app mid-reply
        ends it as ``interrupted``; both keep the text so far. The app's clock is read once a piece (and once
        more at the end): the thinking lasted from its first piece to the first piece of the answer."""
        store = self.li_app.store
        status = self.query_one(StatusBar)
        clock = self.li_app.clock
        self._stopping = False
        timing = ReplyTiming(started=clock())
        saved_at = timing.started
        state: MessageState = "interrupted"
        error: str | None = None
        status.activity = "generating…"
        try:
            async with contextlib.aclosing(self.li_app.client.chat(request)) as stream:
                async for chunk in stream:
                    now = clock()
                    thinking, thought = timing.thinking_since is not None, timing.thinking_ms is not None
                    timing.observe(chunk, now)
                    await view.append(chunk.text, chunk.reasoning)
                    if not thinking and timing.thinking_since is not None:
                        self.refresh_bindings()  # the thinking's key now has a block to toggle
                    if not thought and timing.thinking_ms is not None:
                        await view.thought(timing.thinking_ms)
                    if now - saved_at > SAVE_EVERY_S:
                        store.update_message(
                            reply.id,
                            content=view.content,
                            state="streaming",
                            ttft_ms=timing.ttft_ms,
                            reasoning=view.reasoning,
                        )
                        saved_at = now
            state = "complete"
        except asyncio.CancelledError:
            state = "stopped" if self._stopping else "interrupted"
            raise
        except LocalInferError as exc:
            state, error = "error", exc.message
            self.notify(f"{exc.message}. {exc.hint}".strip(), title="the reply failed", severity="error")
        finally:
            timing.end(clock())
            thinking_tokens = (timing.reasoning_tokens or view.thinking_tokens) if view.reasoning else None
            store.update_message(
                reply.id,
                content=view.content,
                state=state,
                ttft_ms=timing.ttft_ms,
                tokens_per_second=timing.tokens_per_second,
                error=error,
                reasoning=view.reasoning,
                thinking_ms=timing.thinking_ms,
                thinking_tokens=thinking_tokens,
            )
            if view.is_attached:  # not when the app is closing
                status.activity = ""
                await view.finish(
                    state=state,
                    ttft_ms=timing.ttft_ms,
                    tokens_per_second=timing.tokens_per_second,
                    error=error,
                    thinking_ms=timing.thinking_ms,
                    thinking_tokens=thinking_tokens,
                )
                self.li_app.refresh_status()

    # --- actions ---------------------------------------------------------------------------------------

    def action_stop(self) -> None:
        if self.generating:
            self._stopping = True
            self.workers.cancel_group(self, "generation")

    async def action_new_conversation(self) -> None:
        if self.generating:
            self.notify("stop the reply first (Esc)", severity="warning")
            return
        model = self.model or self.li_app.default_model
        await self.open_conversation(self.li_app.store.create(model=model))
        self.query_one(PromptInput).focus()

    def action_models(self) -> None:
        self.li_app.action_models()

    def _last(self, role: str) -> StoredMessage | None:
        if self.conversation is None:
            return None
        return next((m for m in reversed(self.li_app.store.messages(self.conversation.id)) if m.role == role), None)

    async def _drop_from(self, message: StoredMessage) -> None:
        self.li_app.store.delete_from(message.id)
        assert self.conversation is not None
        await self.open_conversation(self.li_app.store.get(self.conversation.id))

    async def action_retry(self) -> None:
        """Ask again for the last reply."""
        reply = self._last("assistant")
        if self.generating or reply is None:
            return
        await self._drop_from(reply)
        await self._reply()

    async def action_edit_last(self) -> None:
        """Put the last message back in the prompt, dropping it and what followed."""
        message = self._last("user")
        if self.generating or message is None:
            return
        await self._drop_from(message)
        prompt = self.query_one(PromptInput)
        prompt.text = message.content
        prompt.focus()

    def action_copy_reply(self) -> None:
        reply = self._last("assistant")
        if reply is not None:
            self.app.copy_to_clipboard(reply.content)
            self.notify("the reply was copied")

    def action_toggle_thinking(self) -> None:
        """Expand or collapse the thinking of the latest reply that has some."""
        views = [v for v in self.query(MessageView) if v.thinking_block is not None]
        if not views:
            self.notify("no reply here has thinking to show", severity="warning")
            return
        block = views[-1].thinking_block
        assert block is not None
        block.toggle()

    def action_copy_code(self) -> None:
        views = [v for v in self.query(MessageView) if v.role == "assistant" and v.code_blocks()]
        if not views:
            self.notify("no code block to copy", severity="warning")
            return
        self.app.copy_to_clipboard(views[-1].code_blocks()[-1])
        self.notify("the last code block was copied")

    @work
    async def action_settings(self) -> None:
        if self.conversation is None:
            return
        box = self.toolbox
        tools = box.all_tools() if box is not None else None
        dialog = SettingsScreen(self.conversation.settings, tools, box.steps if box is not None else 8)
        settings = await self.app.push_screen_wait(dialog)
        if settings is None:
            return
        old = self.conversation.settings
        self.conversation = self.li_app.store.update_settings(self.conversation.id, settings)
        if settings.context_length != old.context_length and self.conversation.model:
            self.load_model(self.conversation.model, settings.context_length)

    @work
    async def action_rename(self) -> None:
        if self.conversation is None:
            return
        title = await self.app.push_screen_wait(TextInputScreen("Rename the conversation", self.conversation.title))
        if title:
            self.conversation = self.li_app.store.rename(self.conversation.id, title)
            self.app.sub_title = title
            await self.refresh_list()

    @work
    async def action_delete_conversation(self) -> None:
        if self.conversation is None or self.generating:
            return
        if not await self.app.push_screen_wait(ConfirmScreen(f"Delete '{self.conversation.title}'?")):
            return
        store = self.li_app.store
        store.delete(self.conversation.id)
        remaining = store.list_conversations()
        model = self.model
        await self.open_conversation(remaining[0] if remaining else store.create(model=model))

    def action_export(self) -> None:
        if self.conversation is None:
            return
        path = export_path(self.li_app.export_dir, self.conversation)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.li_app.store.export_markdown(self.conversation.id), encoding="utf-8")
        except OSError as exc:
            self.notify(f"cannot write {path}: {exc.strerror}", title="not exported", severity="error")
            return
        self.notify(f"exported to {path}")


def export_path(folder: Path, conversation: Conversation) -> Path:
    """``<folder>/<title>-<id>.md`` with the title made safe for a file name."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in conversation.title).strip("-")[:40] or "chat"
    return folder / f"{safe}-{conversation.id}.md"
