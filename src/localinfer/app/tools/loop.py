"""The tool loop the app's chat and ``run --mcp`` share: the model answers with the connected servers' tools
offered; each call it makes is approved (or not) before it runs, its output capped and fed back as a tool turn;
the model is asked again, until it answers without a call or the step limit is reached (the last request then
offers no tools, so the model must answer). Nothing runs unapproved unless the policy allows that tool.

The loop reports what happens as events (``on_event``), which the chat renders as widgets and ``run`` as lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from localinfer.app.tools.hub import McpHub
from localinfer.app.tools.sessions import ToolFailed, ToolInfo
from localinfer.client.base import InferenceClient
from localinfer.types import ChatMessage, ChatRequest, TokenChunk, Tool, ToolCall

CallStatus = Literal["ok", "error", "denied", "stopped", "failed"]


@dataclass(frozen=True)
class Decision:
    """The user's answer to a call: run it (``always``: and this tool from now on without asking), or not, and
    why (the reason goes to the model)."""

    allow: bool
    always: bool = False
    reason: str = ""


Approver = Callable[[ToolInfo, ToolCall], Awaitable[Decision]]


@dataclass
class ToolPolicy:
    """Which tools run without asking: by key (``server/tool``), from the server's ``autoApprove``, the
    conversation's settings, and "always" answers; with ``read_only``, also the tools their server marks
    read-only (``run --yes``)."""

    allowed: set[str] = field(default_factory=set)
    read_only: bool = False

    def allows(self, tool: ToolInfo) -> bool:
        return tool.key in self.allowed or (self.read_only and tool.read_only)


@dataclass(frozen=True)
class ToolRecord:
    """One call as it ended: what was fed back to the model (``output``, capped; ``cut`` characters left out),
    and how it ended."""

    call_id: str
    server: str
    tool: str  # its name on its server
    name: str  # the name the model called it by
    arguments: dict[str, Any]
    status: CallStatus
    output: str
    cut: int = 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @staticmethod
    def from_json(text: str) -> ToolRecord:
        data = json.loads(text)
        return ToolRecord(**{f.name: data[f.name] for f in dataclasses.fields(ToolRecord) if f.name in data})


@dataclass(frozen=True)
class TextStreamed:
    chunk: TokenChunk


@dataclass(frozen=True)
class TurnEnded:
    """The model's turn ended: ``message`` is it (its text and the calls it made); more follow when it called."""

    message: ChatMessage


@dataclass(frozen=True)
class CallAsked:
    """A call waits for the user's approval (not sent when the policy allows the tool)."""

    call: ToolCall
    tool: ToolInfo


@dataclass(frozen=True)
class CallStarted:
    call: ToolCall
    tool: ToolInfo


@dataclass(frozen=True)
class CallEnded:
    record: ToolRecord


@dataclass(frozen=True)
class StepLimitReached:
    steps: int


LoopEvent = TextStreamed | TurnEnded | CallAsked | CallStarted | CallEnded | StepLimitReached


def cap(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters, with a line saying how much was left out; and that count."""
    if len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    return f"{text[:limit]}\n[output cut: {cut} more characters]", cut


def model_tools(tools: Iterable[ToolInfo]) -> tuple[Tool, ...]:
    """The tools as the model gets them. An arguments schema that leaves ``additionalProperties`` open is closed:
    a server takes the arguments it declares, and a forced call constrained by an open schema lets a small model
    add arguments until its tokens run out."""
    return tuple(Tool(t.exposed or t.name, t.description, _closed(t.schema)) for t in tools)


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema:
        return {**schema, "additionalProperties": False}
    return schema


@dataclass
class ToolLoop:
    """One reply with tools. ``approve`` is asked for each call the policy does not allow (None: such calls are
    denied); ``steps``: most rounds of calls; ``output_max``: characters of a tool's output given to the model;
    ``timeout``: seconds a call may run."""

    client: InferenceClient
    hub: McpHub
    policy: ToolPolicy
    approve: Approver | None
    on_event: Callable[[LoopEvent], Awaitable[None]]
    steps: int = 8
    output_max: int = 16_000
    timeout: float = 120.0
    enabled: Callable[[ToolInfo], bool] = lambda _: True
    _running: asyncio.Task[Any] | None = None
    _stopped: bool = False

    async def run(self, request: ChatRequest) -> list[ChatMessage]:
        """The turns the reply added to ``request.messages`` (the model's, and the tools' answers). The first
        request keeps ``request.tool_choice`` (a forced call); the later ones leave the choice to the model."""
        added: list[ChatMessage] = []
        for step in range(self.steps + 1):
            tools = self.hub.tools(self.enabled)  # a server lost on the way no longer offers its tools
            by_name = {t.exposed: t for t in tools}
            last = step == self.steps
            asked = dataclasses.replace(
                request,
                messages=(*request.messages, *added),
                tools=() if last or not tools else model_tools(tools),
                tool_choice=request.tool_choice if step == 0 and tools and not last else "auto",
            )
            if last and step > 0:
                await self.on_event(StepLimitReached(self.steps))
            message = await self._turn(asked)
            if not asked.tools:  # no tools were offered: a call it wrote anyway is not run
                message = dataclasses.replace(message, tool_calls=())
            added.append(message)
            await self.on_event(TurnEnded(message))
            if not message.tool_calls:
                return added
            for call in message.tool_calls:
                record = await self._call(call, by_name.get(call.name))
                added.append(ChatMessage("tool", record.output, tool_call_id=call.id, name=call.name))
                await self.on_event(CallEnded(record))
        return added

    async def _turn(self, request: ChatRequest) -> ChatMessage:
        text: list[str] = []
        reasoning: list[str] = []
        calls: tuple[ToolCall, ...] = ()
        async with contextlib.aclosing(self.client.chat(request)) as stream:
            async for chunk in stream:
                text.append(chunk.text)
                reasoning.append(chunk.reasoning)
                calls = chunk.tool_calls or calls
                await self.on_event(TextStreamed(chunk))
        thought = "".join(reasoning)
        return ChatMessage("assistant", "".join(text), tool_calls=calls, reasoning=thought or None)

    async def _call(self, call: ToolCall, tool: ToolInfo | None) -> ToolRecord:
        if tool is None:
            return self._record(call, "", call.name, "failed", f"there is no tool named {call.name}")
        if not self.policy.allows(tool):
            if self.approve is None:
                return self._record(call, tool.server, tool.name, "denied", "The user did not approve this call.")
            await self.on_event(CallAsked(call, tool))
            decision = await self.approve(tool, call)
            if decision.always:
                self.policy.allowed.add(tool.key)
            if not decision.allow:
                why = f" Their reason: {decision.reason}" if decision.reason else ""
                return self._record(call, tool.server, tool.name, "denied", f"The user denied this call.{why}")
        self._stopped = False
        running = self._running = asyncio.create_task(self.hub.call(tool, call.arguments, timeout=self.timeout))
        try:
            await self.on_event(CallStarted(call, tool))  # stop_tool works from here on
            output = await running
        except asyncio.CancelledError:
            if not self._stopped:
                raise
            return self._record(call, tool.server, tool.name, "stopped", "The user stopped this call.")
        except ToolFailed as exc:
            return self._record(call, tool.server, tool.name, "failed", exc.message)
        finally:
            if not running.done():  # the reply itself was stopped: so is its call
                running.cancel()
            self._running = None
        return self._record(call, tool.server, tool.name, "error" if output.is_error else "ok", output.text)

    def _record(self, call: ToolCall, server: str, tool: str, status: CallStatus, text: str) -> ToolRecord:
        output, cut = cap(text, self.output_max)
        return ToolRecord(call.id, server, tool, call.name, dict(call.arguments), status, output, cut)

    def stop_tool(self) -> bool:
        """Stop the call running now (its result tells the model it was stopped; the loop goes on). False when
        no call runs."""
        if self._running is None or self._running.done():
            return False
        self._stopped = True
        self._running.cancel()
        return True
