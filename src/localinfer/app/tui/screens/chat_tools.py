"""What the chat screen does with tools, apart from its plain replies: a reply through the tool loop (each call
shown, approved in a dialog, its result folded in the chat and saved with the conversation), Ctrl+C to stop a
running tool, and the commands ``/mcp``, ``/prompt`` and ``/resource``."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from abc import abstractmethod
from typing import ClassVar

from textual import work
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen

from localinfer.app.tools.loop import (
    CallAsked,
    CallEnded,
    CallStarted,
    Decision,
    LoopEvent,
    StepLimitReached,
    TextStreamed,
    ToolLoop,
    ToolRecord,
    TurnEnded,
)
from localinfer.app.tools.sessions import ToolInfo
from localinfer.app.tui.attachments import Attachment
from localinfer.app.tui.conversations import Conversation, MessageState, StoredMessage
from localinfer.app.tui.host import TuiHost
from localinfer.app.tui.replies import ReplyTiming
from localinfer.app.tui.screens.approval import ApprovalScreen
from localinfer.app.tui.tools.toolbox import Toolbox
from localinfer.app.tui.widgets.message import MessageView
from localinfer.app.tui.widgets.prompt import PromptInput
from localinfer.app.tui.widgets.status import StatusBar
from localinfer.app.tui.widgets.tool_call import ToolCallView
from localinfer.errors import LocalInferError
from localinfer.types import ChatRequest, ToolCall

COMMANDS = ("/mcp", "/prompt", "/resource")


def shown_messages(messages: list[StoredMessage]) -> list[StoredMessage]:
    """The messages the chat shows: all but the empty turns of a reply that only called tools (before its calls)."""
    return [
        m
        for i, m in enumerate(messages)
        if not (
            m.role == "assistant"
            and m.state == "complete"
            and not m.content.strip()
            and not m.reasoning
            and i + 1 < len(messages)
            and messages[i + 1].role == "tool"
        )
    ]


def tool_view(message: StoredMessage) -> ToolCallView:
    """A stored tool turn as the chat shows it, folded."""
    record = ToolRecord.from_json(message.tool or "{}")
    view = ToolCallView(f"{record.server}/{record.tool}", record.arguments, state=record.status)
    view.output, view.cut = record.output, record.cut
    return view


class ToolChatScreen(Screen[None]):
    """The chat screen's tool part (``ChatScreen`` builds on it)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("ctrl+c", "stop_tool", "Stop tool", priority=True)]

    conversation: Conversation | None
    _tool_loop: ToolLoop | None = None

    @property
    @abstractmethod
    def li_app(self) -> TuiHost:
        """The app this screen serves (``ChatScreen`` says)."""

    @abstractmethod
    def _view(self, message: StoredMessage, attachments: tuple[Attachment, ...] = ()) -> MessageView:
        """A message's view in the log (``ChatScreen`` makes it)."""

    @property
    def toolbox(self) -> Toolbox | None:
        return self.li_app.toolbox

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_tool":
            return self._tool_loop is not None and self._tool_loop._running is not None
        return True

    def action_stop_tool(self) -> None:
        if self._tool_loop is not None and self._tool_loop.stop_tool():
            self.notify("the tool was stopped")

    def uses_tools(self) -> bool:
        """Whether the next reply goes through the tool loop: some tool is offered in this conversation."""
        box = self.toolbox
        return box is not None and self.conversation is not None and bool(box.tools(self.conversation.settings))

    # --- a reply with tools ------------------------------------------------------------------------------

    @work(exclusive=True, group="generation")
    async def generate_with_tools(self, request: ChatRequest, reply: StoredMessage, view: MessageView) -> None:
        """The reply through the tool loop: each turn of the model in its own message, each call as a folded
        ``ToolCallView`` saved as a tool turn. Esc stops it all; Ctrl+C stops the running tool only."""
        box, conversation = self.toolbox, self.conversation
        assert box is not None and conversation is not None
        store, clock = self.li_app.store, self.li_app.clock
        log = self.query_one("#messages", VerticalScroll)
        status = self.query_one(StatusBar)
        turn: dict[str, object] = {"reply": reply, "view": view, "timing": ReplyTiming(started=clock())}
        calls: dict[str, ToolCallView] = {}
        settings = conversation.settings

        async def next_turn() -> tuple[StoredMessage, MessageView, ReplyTiming]:
            if turn["reply"] is None:
                message = store.add_message(conversation.id, "assistant", "", state="streaming", model=request.model)
                new_view = self._view(message)
                await log.mount(new_view)
                turn.update(reply=message, view=new_view, timing=ReplyTiming(started=clock()))
            return turn["reply"], turn["view"], turn["timing"]  # type: ignore[return-value]

        async def end_turn(state: MessageState, error: str | None = None) -> None:
            if turn["reply"] is None:
                return
            message, shown, timing = await next_turn()
            timing.end(clock())
            store.update_message(
                message.id, content=shown.content, state=state, ttft_ms=timing.ttft_ms,
                tokens_per_second=timing.tokens_per_second, error=error, reasoning=shown.reasoning,
            )  # fmt: skip
            if shown.is_attached and state == "complete" and not shown.content.strip() and not shown.reasoning:
                await shown.remove()  # a turn that only called tools: its calls show it
            elif shown.is_attached:
                await shown.finish(
                    state=state, ttft_ms=timing.ttft_ms, tokens_per_second=timing.tokens_per_second, error=error
                )
            turn["reply"] = None

        async def on_event(event: LoopEvent) -> None:
            if isinstance(event, TextStreamed):
                _, shown, timing = await next_turn()
                timing.observe(event.chunk, clock())
                await shown.append(event.chunk.text, event.chunk.reasoning)
            elif isinstance(event, TurnEnded):
                await end_turn("complete")
                for call in event.message.tool_calls:
                    calls[call.id] = ToolCallView(call.name, dict(call.arguments), state="running")
                    await log.mount(calls[call.id])
                log.anchor()
            elif isinstance(event, CallAsked):
                calls[event.call.id].key = event.tool.key
                calls[event.call.id].set_state("asking")
            elif isinstance(event, CallStarted):
                calls[event.call.id].key = event.tool.key
                calls[event.call.id].set_state("running")
                status.activity = f"running {event.tool.key}… (Ctrl+C stops it)"
                self.refresh_bindings()
            elif isinstance(event, CallEnded):
                record = event.record
                calls[record.call_id].end(record.status, record.output, record.cut)
                store.add_message(conversation.id, "tool", record.output, tool=record.to_json())
                status.activity = "generating…"
                self.refresh_bindings()
            elif isinstance(event, StepLimitReached):
                self.notify(f"{event.steps} rounds of tool calls: the model must answer now", severity="warning")

        loop = ToolLoop(
            self.li_app.client, box.hub, box.policy(settings), self._approve, on_event,
            steps=box.steps_for(settings), output_max=box.output_max, timeout=box.timeout,
            enabled=box.enabled(settings),
        )  # fmt: skip
        self._tool_loop = loop
        status.activity = "generating…"
        try:
            await loop.run(request)
        except asyncio.CancelledError:
            await end_turn("stopped")
            raise
        except LocalInferError as exc:
            await end_turn("error", exc.message)
            self.notify(f"{exc.message}. {exc.hint}".strip(), title="the reply failed", severity="error")
        finally:
            self._tool_loop = None
            self._remember_always(loop)
            if self.is_attached:
                status.activity = ""
                self.li_app.refresh_status()

    async def _approve(self, tool: ToolInfo, call: ToolCall) -> Decision:
        return await self.app.push_screen_wait(ApprovalScreen(tool, call))

    def _remember_always(self, loop: ToolLoop) -> None:
        """Tools the user allowed "always" stay allowed in this conversation (saved in its settings)."""
        if self.conversation is None:
            return
        settings = self.conversation.settings
        chosen = sorted(set(settings.auto_approve) | {k for k in loop.policy.allowed if k not in self._server_wide()})
        if tuple(chosen) != tuple(settings.auto_approve):
            from dataclasses import replace

            self.conversation = self.li_app.store.update_settings(
                self.conversation.id, replace(settings, auto_approve=tuple(chosen))
            )

    def _server_wide(self) -> set[str]:
        box = self.toolbox
        if box is None:
            return set()
        return {f"{n}/{t}" for n, s in box.hub.specs.items() for t in s.auto_approve}

    # --- commands ------------------------------------------------------------------------------------------

    async def tool_command(self, text: str) -> bool:
        """Run ``text`` when it is one of the tool commands (True), else leave it to the chat (False)."""
        words = text.split()
        if not words or words[0] not in COMMANDS:
            return False
        box = self.toolbox
        if box is None:
            self.notify("no MCP servers are declared (localinfer mcp import)", severity="warning")
            return True
        self.query_one(PromptInput).clear()
        try:
            if words[0] == "/mcp":
                await self._mcp_command(box, words[1:])
            elif words[0] == "/prompt":
                await self._insert_prompt(box, text)
            else:
                await self._insert_resource(box, words[1:])
        except LocalInferError as exc:
            self.notify(f"{exc.message}. {exc.hint}".strip(), severity="error")
        return True

    async def _mcp_command(self, box: Toolbox, args: list[str]) -> None:
        if len(args) == 2 and args[0] in ("connect", "disconnect"):
            if args[0] == "connect":
                session = await box.hub.connect(args[1])
                self.notify(f"{args[1]}: connected, {len(session.tools)} tools")
            else:
                await box.hub.disconnect(args[1])
                self.notify(f"{args[1]}: disconnected")
            return
        self.notify("\n".join(box.status()) or "no MCP servers declared", title="MCP servers")

    async def _insert_prompt(self, box: Toolbox, text: str) -> None:
        """``/prompt NAME key=value ...``: the server's prompt, filled in, put into the message being written."""
        words = shlex.split(text)[1:]
        if not words:
            self.notify(", ".join(p.name for p in box.hub.prompts()) or "no prompts", title="MCP prompts")
            return
        prompt = next((p for p in box.hub.prompts() if p.name == words[0]), None)
        if prompt is None:
            self.notify(f"no prompt {words[0]}", severity="error")
            return
        arguments = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        missing = [a for a in prompt.required if a not in arguments]
        if missing:
            self.notify(f"/prompt {prompt.name} needs {', '.join(f'{a}=…' for a in missing)}", severity="warning")
            return
        self._insert(await box.hub.prompt(prompt, arguments))

    async def _insert_resource(self, box: Toolbox, args: list[str]) -> None:
        """``/resource URI-or-NAME``: the resource's text put into the message being written."""
        if not args:
            self.notify("\n".join(f"{r.uri} ({r.name})" for r in box.hub.resources()) or "none", title="resources")
            return
        found = next((r for r in box.hub.resources() if args[0] in (r.uri, r.name)), None)
        if found is None:
            self.notify(f"no resource {args[0]}", severity="error")
            return
        self._insert(await box.hub.read(found))

    def _insert(self, text: str) -> None:
        prompt = self.query_one(PromptInput)
        prompt.text = f"{prompt.text}\n{text}".strip() if prompt.text.strip() else text
        prompt.focus()

    async def connect_servers(self) -> None:
        """Connect the declared servers (not disabled); one line for each that fails, and the chat goes on."""
        box = self.toolbox
        if box is None or not box.connect_at_start:
            return
        with contextlib.suppress(asyncio.CancelledError):
            for failure in await box.hub.connect_all():
                self.notify(failure.message, title="MCP server", severity="warning")
