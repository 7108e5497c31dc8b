"""Connections to MCP servers through the official SDK (``mcp``): one ``McpSession`` per server, and ``McpHub``,
the servers a chat or ``run --mcp`` uses, their tools listed once when they connect.

Each session lives in a task of its own: the SDK's transports and ``ClientSession`` are async context managers
whose scopes must be left by the task that entered them, so calls from the chat reach the session across tasks
and ``stop`` ends that task. A server that fails to start or dies is reported in one line (``on_gone``), never
as a traceback; its pending call ends with ``ToolFailed``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from localinfer.app.tools.servers import ServerSpec
from localinfer.errors import LocalInferError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 60.0


class McpServerFailed(LocalInferError):
    """An MCP server could not be started or reached, or stopped answering."""

    def __init__(self, server: str, why: str) -> None:
        super().__init__(f"MCP server '{server}' {why}", hint="check its command or URL (localinfer mcp ls)")
        self.server = server


class ToolFailed(LocalInferError):
    """A tool call that got no result: its server died or refused the call."""


@dataclass(frozen=True)
class ToolInfo:
    """A tool a server offers: ``name`` on its server, ``exposed`` as the model sees it (``server__name`` when
    two servers offer the same name), its arguments' JSON schema, and whether the server marks it read-only."""

    server: str
    name: str
    description: str
    schema: dict[str, Any]
    read_only: bool = False
    exposed: str = ""

    @property
    def key(self) -> str:
        """``server/name``: how settings and approvals name it."""
        return f"{self.server}/{self.name}"


@dataclass(frozen=True)
class PromptInfo:
    server: str
    name: str
    description: str = ""
    arguments: tuple[str, ...] = ()  # the names of its arguments
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResourceInfo:
    server: str
    uri: str
    name: str
    description: str = ""


@dataclass(frozen=True)
class ToolOutput:
    """What a tool answered, as text (images and binary parts described, not inlined)."""

    text: str
    is_error: bool = False


@dataclass
class McpSession:
    """One server, connected by ``start`` and disconnected by ``stop``."""

    spec: ServerSpec
    errlog: Path | None = None  # where a stdio server's stderr goes (default: nowhere)
    on_gone: Callable[[str, str], None] | None = None  # (server, why) once a connected server is lost
    tools: list[ToolInfo] = field(default_factory=list)
    prompts: list[PromptInfo] = field(default_factory=list)
    resources: list[ResourceInfo] = field(default_factory=list)
    _session: Any = None
    _task: asyncio.Task[None] | None = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _error: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def connected(self) -> bool:
        return self._session is not None

    async def start(self, timeout: float = CONNECT_TIMEOUT_S) -> None:
        """Start or reach the server and list what it offers. Raises McpServerFailed saying why not."""
        self._ready.clear()
        self._stop.clear()
        self._error = None
        self._task = asyncio.create_task(self._run(), name=f"mcp {self.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except asyncio.TimeoutError:
            await self.stop()
            raise McpServerFailed(self.name, f"did not answer in {timeout:.0f} s") from None
        if self._session is None:
            await self.stop()
            raise McpServerFailed(self.name, self._error or "did not start")

    async def _run(self) -> None:
        errlog: TextIO | None = None
        try:
            async with AsyncExitStack() as stack:
                errlog = stack.enter_context(_open_errlog(self.errlog))
                read, write = await stack.enter_async_context(_transport(self.spec, errlog))
                from mcp import ClientSession

                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                await self._list(session)
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except asyncio.CancelledError:
            if not self._stop.is_set():  # the SDK cancelled us: its connection ended
                self._lost("stopped answering")
            else:
                raise
        except BaseException as exc:
            self._lost(_why(exc))
        else:
            self._session = None

    def _lost(self, why: str) -> None:
        was_connected = self._session is not None
        self._session = None
        self._error = why
        log.warning("MCP server %s: %s", self.name, why)
        self._ready.set()
        if was_connected and self.on_gone is not None:
            self.on_gone(self.name, why)

    async def _list(self, session: Any) -> None:
        caps = session.server_capabilities
        tools = (await session.list_tools()).tools if caps is None or caps.tools is not None else []
        self.tools = [
            ToolInfo(
                self.name,
                t.name,
                t.description or "",
                dict(t.input_schema or {"type": "object", "properties": {}}),
                read_only=bool(t.annotations is not None and t.annotations.read_only_hint),
                exposed=t.name,
            )
            for t in tools
        ]
        if caps is not None and caps.prompts is not None:
            self.prompts = [
                PromptInfo(
                    self.name,
                    p.name,
                    p.description or "",
                    tuple(a.name for a in p.arguments or ()),
                    tuple(a.name for a in p.arguments or () if a.required),
                )
                for p in (await session.list_prompts()).prompts
            ]
        if caps is not None and caps.resources is not None:
            self.resources = [
                ResourceInfo(self.name, str(r.uri), r.name, r.description or "")
                for r in (await session.list_resources()).resources
            ]

    async def stop(self) -> None:
        """Disconnect (a stdio server's process is ended by the SDK); stopping twice is fine."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 10)
            except (asyncio.TimeoutError, Exception):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._session = None

    def _live(self) -> Any:
        if self._session is None:
            raise ToolFailed(f"MCP server '{self.name}' is not connected", hint="/mcp connect " + self.name)
        return self._session

    async def call(self, tool: str, arguments: Mapping[str, Any], *, timeout: float) -> ToolOutput:
        """Run ``tool``; its answer as text. A tool that raised answers ``is_error``; ToolFailed when no answer
        came (the server died, refused the call, or ``timeout`` seconds passed)."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        session = self._live()
        try:
            result = await session.call_tool(tool, dict(arguments), read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:  # the server is gone: say so once, and end its task
                self._lost("exited")
                self._stop.set()
            raise ToolFailed(f"{tool} on '{self.name}' got no result: {exc.error.message}") from exc
        except (OSError, RuntimeError) as exc:
            raise ToolFailed(f"{tool} on '{self.name}' got no result: {_why(exc)}") from exc
        return ToolOutput(content_text(result.content, result.structured_content), bool(result.is_error))

    async def prompt(self, name: str, arguments: Mapping[str, str]) -> str:
        """The prompt ``name`` filled in, as text (its messages' text, one after another)."""
        from mcp import MCPError

        try:
            result = await self._live().get_prompt(name, dict(arguments))
        except MCPError as exc:
            raise ToolFailed(f"prompt {name} on '{self.name}': {exc.error.message}") from exc
        return "\n\n".join(content_text([m.content]) for m in result.messages)

    async def read(self, uri: str) -> str:
        """The resource at ``uri`` as text."""
        from mcp import MCPError

        try:
            result = await self._live().read_resource(uri)
        except MCPError as exc:
            raise ToolFailed(f"resource {uri} on '{self.name}': {exc.error.message}") from exc
        return content_text(result.contents)


def content_text(parts: Sequence[Any], structured: Any = None) -> str:
    """MCP content as text: text parts as they are, a resource's text, and a line for each image, sound or
    binary part; the structured content as JSON when there is no text."""
    import json

    lines: list[str] = []
    for part in parts:
        kind = getattr(part, "type", None)
        text = getattr(part, "text", None)
        if isinstance(text, str):
            lines.append(text)
        elif kind in ("image", "audio"):
            size = len(base64.b64decode(part.data, validate=False)) if part.data else 0
            lines.append(f"[{kind}: {part.mime_type}, {size} bytes]")
        elif kind == "resource":
            inner = part.resource
            lines.append(inner.text if hasattr(inner, "text") else f"[resource {inner.uri}: binary]")
        elif kind == "resource_link":
            lines.append(f"[resource {part.uri}]")
        elif hasattr(part, "blob"):
            lines.append(f"[resource {part.uri}: binary]")
    if not lines and structured is not None:
        lines.append(json.dumps(structured, ensure_ascii=False))
    return "\n".join(lines)


def _why(exc: BaseException) -> str:
    """One line for what went wrong, from an exception or an exception group of the SDK's task groups."""
    while getattr(exc, "exceptions", None):  # an ExceptionGroup (Python 3.11+, or anyio's backport)
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    if isinstance(exc, FileNotFoundError):
        return f"could not start: {exc.filename or exc.strerror} not found"
    if isinstance(exc, OSError):
        return f"could not start: {exc.strerror or exc}"
    error = getattr(exc, "error", None)  # MCPError carries ErrorData
    message = getattr(error, "message", None) or str(exc) or type(exc).__name__
    return f"failed: {message}".splitlines()[0]


@contextlib.contextmanager
def _open_errlog(path: Path | None) -> Any:
    import os

    if path is None:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            yield sink
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as sink:
        yield sink


def _transport(spec: ServerSpec, errlog: TextIO) -> Any:
    """The SDK's transport context for ``spec``: a stdio child, or Streamable HTTP with the spec's headers."""
    if spec.transport == "stdio":
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=spec.cwd)
        return stdio_client(params, errlog=errlog)
    return _http_transport(spec)


@contextlib.asynccontextmanager
async def _http_transport(spec: ServerSpec) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout) as http,
        streamable_http_client(spec.url, http_client=http) as streams,
    ):
        yield streams[0], streams[1]
