"""MCP servers as the user declared them, in the ``mcpServers`` shape Claude Desktop, LM Studio, Cursor and Cline
use: a stdio server is ``{"command", "args", "env", "cwd"}``, a Streamable HTTP one ``{"url", "headers"}``; both
may say ``"disabled": true`` and ``"autoApprove": [tool names]`` (Cline's key: those tools run without asking).

localinfer reads them from its settings (the TOML file's ``[mcpServers.NAME]`` tables) and from ``mcp.json``
beside its config file (what ``localinfer mcp import`` writes), the settings winning on a name both have. The
values of ``env`` and ``headers`` are secrets as far as localinfer knows: ``shown`` never includes them, and
nothing writes them to a log or a conversation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from localinfer.config import Settings, default_config_file
from localinfer.errors import ConfigError

Transport = Literal["stdio", "http"]
MCP_FILE = "mcp.json"


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server: how to start or reach it, and which of its tools run without asking."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets: never logged
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets: never logged
    disabled: bool = False
    auto_approve: tuple[str, ...] = ()

    def shown(self) -> str:
        """What the user sees of it: the command line or the URL, and the names (never the values) of its env
        and headers."""
        where = " ".join([self.command, *self.args]) if self.transport == "stdio" else self.url
        secrets = [*(f"env {k}" for k in self.env), *(f"header {k}" for k in self.headers)]
        return where + (f" ({', '.join(secrets)} set)" if secrets else "")

    def to_json(self) -> dict[str, Any]:
        """The entry in the ``mcpServers`` shape, secrets included (for ``mcp.json`` only)."""
        entry: dict[str, Any]
        if self.transport == "stdio":
            entry = {"command": self.command, "args": list(self.args)}
            if self.env:
                entry["env"] = dict(self.env)
            if self.cwd:
                entry["cwd"] = self.cwd
        else:
            entry = {"url": self.url}
            if self.headers:
                entry["headers"] = dict(self.headers)
        if self.disabled:
            entry["disabled"] = True
        if self.auto_approve:
            entry["autoApprove"] = list(self.auto_approve)
        return entry


def parse_server(name: str, entry: object, *, where: str) -> ServerSpec:
    """The spec of the ``mcpServers`` entry ``name``. Raises ConfigError naming ``where`` and what is wrong."""

    def wrong(what: str) -> ConfigError:
        return ConfigError(f"MCP server '{name}' in {where}: {what}", hint="see docs/configuration.md, mcpServers")

    if not isinstance(entry, Mapping):
        raise wrong("expected a table with 'command' or 'url'")
    strings = _string_map(entry.get("env"), wrong, "env")
    headers = _string_map(entry.get("headers"), wrong, "headers")
    approve = entry.get("autoApprove", entry.get("auto_approve", []))
    if not isinstance(approve, list) or not all(isinstance(t, str) for t in approve):
        raise wrong("'autoApprove' must be a list of tool names")
    disabled = bool(entry.get("disabled", False))
    command, url = entry.get("command"), entry.get("url") or entry.get("serverUrl")
    if isinstance(command, str) and command.strip():
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise wrong("'args' must be a list of strings")
        cwd = entry.get("cwd")
        return ServerSpec(
            name, "stdio", command=command, args=tuple(args), env=strings, cwd=str(cwd) if cwd else None,
            disabled=disabled, auto_approve=tuple(approve),
        )  # fmt: skip
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return ServerSpec(name, "http", url=url, headers=headers, disabled=disabled, auto_approve=tuple(approve))
    raise wrong("expected 'command' (a program to start) or 'url' (http:// or https://)")


def _string_map(value: object, wrong: Any, key: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, (str, int, float)) for v in value.values()):
        raise wrong(f"'{key}' must be a table of strings")
    return {str(k): str(v) for k, v in value.items()}


def parse_servers(table: Mapping[str, object], *, where: str) -> dict[str, ServerSpec]:
    """Every entry of an ``mcpServers`` table. Raises ConfigError at the first one that is wrong."""
    return {name: parse_server(name, entry, where=where) for name, entry in table.items()}


def mcp_file() -> Path:
    """``mcp.json`` beside the config file (``$LOCALINFER_CONFIG``'s folder, else the platform's)."""
    config = Path(os.environ.get("LOCALINFER_CONFIG") or default_config_file())
    return config.parent / MCP_FILE


def read_mcp_file(path: Path) -> dict[str, object]:
    """The ``mcpServers`` table of a JSON file in that shape ({} when the file is not there). Raises ConfigError
    for a file that is not such JSON."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", hint="fix or remove the file") from exc
    table = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ConfigError(f"{path} has no 'mcpServers' table", hint='it holds {"mcpServers": {"name": {...}}}')
    return table


def configured_servers(settings: Settings) -> dict[str, ServerSpec]:
    """Every server declared: ``mcp.json``'s, then the settings' (which win on a name both have)."""
    path = mcp_file()
    servers = parse_servers(read_mcp_file(path), where=str(path))
    servers.update(parse_servers(settings.mcp_servers, where="the settings (mcpServers)"))
    return servers


def write_mcp_file(path: Path, servers: Mapping[str, ServerSpec]) -> None:
    """Write ``servers`` as ``{"mcpServers": ...}`` to ``path``, readable by its owner only (it may hold
    secrets), replacing the file whole (a crash leaves the old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    body = json.dumps({"mcpServers": {n: s.to_json() for n, s in servers.items()}}, indent=2, ensure_ascii=False)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(body + "\n")
    os.replace(partial, path)
