"""``McpHub``: the MCP servers one app (or one ``run --mcp``) uses, by name; their tools as the model sees them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from localinfer.app.tools.servers import ServerSpec
from localinfer.app.tools.sessions import (
    McpServerFailed,
    McpSession,
    PromptInfo,
    ResourceInfo,
    ToolFailed,
    ToolInfo,
    ToolOutput,
)
from localinfer.errors import ConfigError


class McpHub:
    """Servers declared (``specs``), those connected, and their tools. ``log_dir``: where each stdio server's
    stderr is kept (``NAME.log``); ``on_gone(server, why)``: a connected server was lost."""

    def __init__(
        self,
        specs: Mapping[str, ServerSpec],
        *,
        log_dir: Path | None = None,
        on_gone: Callable[[str, str], None] | None = None,
    ) -> None:
        self.specs = dict(specs)
        self.log_dir = log_dir
        self.on_gone = on_gone
        self.sessions: dict[str, McpSession] = {}

    def spec(self, name: str) -> ServerSpec:
        """The declaration of ``name``. Raises ConfigError naming the servers declared."""
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(self.specs) or "none"
            raise ConfigError(f"no MCP server '{name}' is declared (declared: {known})", hint="localinfer mcp ls")
        return spec

    def _session(self, name: str) -> McpSession:
        spec = self.spec(name)
        return McpSession(spec, errlog=self.log_dir / f"{name}.log" if self.log_dir else None, on_gone=self._gone)

    def _gone(self, server: str, why: str) -> None:
        if self.on_gone is not None:
            self.on_gone(server, why)

    async def connect(self, name: str) -> McpSession:
        """Connect the server ``name`` (again, if it was lost). Raises ConfigError for a name not declared and
        McpServerFailed when it does not start."""
        old = self.sessions.pop(name, None)
        if old is not None:
            await old.stop()
        session = self._session(name)
        await session.start()
        self.sessions[name] = session
        return session

    async def connect_all(self, names: Iterable[str] | None = None) -> list[McpServerFailed]:
        """Connect ``names`` (default: every declared server that is not disabled), together; the failures,
        one per server that did not start (the others are connected)."""
        chosen = list(names) if names is not None else [n for n, s in self.specs.items() if not s.disabled]
        results = await asyncio.gather(*(self.connect(n) for n in chosen), return_exceptions=True)
        failed = []
        for result in results:
            if isinstance(result, McpServerFailed):
                failed.append(result)
            elif isinstance(result, BaseException):
                raise result
        return failed

    async def disconnect(self, name: str) -> None:
        session = self.sessions.pop(name, None)
        if session is not None:
            await session.stop()

    async def close(self) -> None:
        """Disconnect every server (stdio servers' processes end)."""
        sessions, self.sessions = list(self.sessions.values()), {}
        await asyncio.gather(*(s.stop() for s in sessions), return_exceptions=True)

    def tools(self, enabled: Callable[[ToolInfo], bool] = lambda _: True) -> list[ToolInfo]:
        """The connected servers' tools that ``enabled`` keeps, named for the model: a tool's own name, or
        ``server__name`` where two servers offer that name."""
        found = [t for s in self.sessions.values() if s.connected for t in s.tools if enabled(t)]
        counts: dict[str, int] = {}
        for tool in found:
            counts[tool.name] = counts.get(tool.name, 0) + 1
        return [_exposed(t, t.name if counts[t.name] == 1 else f"{t.server}__{t.name}") for t in found]

    def prompts(self) -> list[PromptInfo]:
        return [p for s in self.sessions.values() if s.connected for p in s.prompts]

    def resources(self) -> list[ResourceInfo]:
        return [r for s in self.sessions.values() if s.connected for r in s.resources]

    async def call(self, tool: ToolInfo, arguments: Mapping[str, Any], *, timeout: float) -> ToolOutput:
        session = self.sessions.get(tool.server)
        if session is None or not session.connected:
            raise ToolFailed(f"MCP server '{tool.server}' is not connected", hint=f"/mcp connect {tool.server}")
        return await session.call(tool.name, arguments, timeout=timeout)

    async def prompt(self, prompt: PromptInfo, arguments: Mapping[str, str]) -> str:
        return await self._connected(prompt.server).prompt(prompt.name, arguments)

    async def read(self, resource: ResourceInfo) -> str:
        return await self._connected(resource.server).read(resource.uri)

    def _connected(self, server: str) -> McpSession:
        session = self.sessions.get(server)
        if session is None or not session.connected:
            raise ToolFailed(f"MCP server '{server}' is not connected", hint=f"/mcp connect {server}")
        return session


def _exposed(tool: ToolInfo, name: str) -> ToolInfo:
    from dataclasses import replace

    return replace(tool, exposed=name)
