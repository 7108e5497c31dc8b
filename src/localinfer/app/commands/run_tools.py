"""``localinfer run MODEL --mcp NAME "..."``: the answer with the tools of MCP servers, through the same loop as
the app's chat. The answer goes to stdout; the calls, their approvals and their results to stderr. A call is
approved on the terminal (``/dev/tty``, so piped input still works); with no terminal it is denied, unless
``--yes`` and the tool is marked safe (its server says it is read-only, or its ``autoApprove`` lists it)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from localinfer.app.tools.loop import (
    CallAsked,
    CallEnded,
    Decision,
    LoopEvent,
    StepLimitReached,
    TextStreamed,
    ToolLoop,
    ToolPolicy,
)

if TYPE_CHECKING:
    from localinfer.app.tools.sessions import ToolInfo
    from localinfer.client.base import InferenceClient
    from localinfer.config import Settings
    from localinfer.types import ChatRequest, ToolCall

ANSWERS = "[y]es once, [a]lways for this tool, [n]o"


def open_terminal() -> tuple[IO[str], IO[str]] | None:
    """The terminal to ask on (read, write), or None when this process has none."""
    try:
        return open("/dev/tty", encoding="utf-8"), open("/dev/tty", "w", encoding="utf-8")
    except OSError:
        return None


def describe(call: ToolCall) -> str:
    return f"{call.name}({json.dumps(call.arguments, ensure_ascii=False)})"


def terminal_approver(tty: tuple[IO[str], IO[str]]) -> Callable[[ToolInfo, ToolCall], asyncio.Future[Decision]]:
    """Ask on ``tty`` for each call: y (once), a (always for this tool), n (then an optional reason)."""
    read, write = tty

    def ask(tool: ToolInfo, call: ToolCall) -> Decision:
        while True:
            write.write(f"run {tool.key} {describe(call)}? {ANSWERS}: ")
            write.flush()
            answer = read.readline().strip().lower()
            if answer in ("y", "yes"):
                return Decision(True)
            if answer in ("a", "always"):
                return Decision(True, always=True)
            if answer in ("n", "no", ""):
                write.write("reason for the model (Enter for none): ")
                write.flush()
                return Decision(False, reason=read.readline().strip())

    def approve(tool: ToolInfo, call: ToolCall) -> asyncio.Future[Decision]:
        return asyncio.get_running_loop().run_in_executor(None, ask, tool, call)

    return approve


def check_servers(settings: Settings, servers: list[str]) -> None:
    """Raise ConfigError for a server ``--mcp`` names that is not declared (before any model is loaded)."""
    from localinfer.app.tools.hub import McpHub
    from localinfer.app.tools.servers import configured_servers

    hub = McpHub(configured_servers(settings))
    for name in servers:
        hub.spec(name)


async def answer_with_tools(
    client: InferenceClient, request: ChatRequest, settings: Settings, servers: list[str], *, yes: bool
) -> None:
    """Connect ``servers``, answer ``request`` through the tool loop, print it; disconnect. Raises ConfigError
    for a server not declared, McpServerFailed for one that does not start."""
    from localinfer.app.tools.hub import McpHub
    from localinfer.app.tools.servers import configured_servers

    specs = configured_servers(settings)
    hub = McpHub(specs, log_dir=settings.home / "mcp-logs")
    err = sys.stderr
    try:
        for name in servers:
            await hub.connect(name)
        allowed = {f"{n}/{t}" for n in servers for t in specs[n].auto_approve}
        tty = open_terminal()
        loop = ToolLoop(
            client,
            hub,
            ToolPolicy(allowed, read_only=yes),
            terminal_approver(tty) if tty is not None else None,
            on_event=lambda event: _print(event, err),
            steps=settings.tool_steps,
            output_max=settings.tool_output_max,
            timeout=settings.tool_timeout,
        )
        await loop.run(request)
        sys.stdout.write("\n")
    finally:
        await hub.close()


async def _print(event: LoopEvent, err: IO[str]) -> None:
    if isinstance(event, TextStreamed):
        sys.stdout.write(event.chunk.text)
        sys.stdout.flush()
    elif isinstance(event, CallAsked):
        err.write(f"\n[tool] {event.tool.key} asks to run: {describe(event.call)}\n")
    elif isinstance(event, CallEnded):
        record = event.record
        first = record.output.strip().splitlines()[0] if record.output.strip() else ""
        cut = f" (cut: {record.cut} characters)" if record.cut else ""
        err.write(f"[tool] {record.server}/{record.tool} {record.status}{cut}: {first[:200]}\n")
    elif isinstance(event, StepLimitReached):
        err.write(f"[tool] {event.steps} steps of calls: the model must answer now\n")
    err.flush()
