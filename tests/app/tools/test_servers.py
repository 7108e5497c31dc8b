"""MCP servers as declared: the mcpServers shape (stdio and HTTP entries, Cline's autoApprove), the config file's
[mcpServers.NAME] tables, mcp.json beside it, other apps' files found and imported, and secrets never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localinfer.app.tools.imports import ForeignConfig, known_configs, merge
from localinfer.app.tools.servers import configured_servers, parse_server, parse_servers
from localinfer.config import Settings
from localinfer.errors import ConfigError


def test_a_stdio_and_an_http_entry_are_read_in_the_mcpservers_shape() -> None:
    servers = parse_servers(
        {
            "files": {"command": "npx", "args": ["-y", "fs"], "env": {"K": "v"}, "autoApprove": ["read"]},
            "web": {"url": "http://127.0.0.1:3000/mcp", "headers": {"Authorization": "Bearer t"}, "disabled": True},
        },
        where="test",
    )
    files, web = servers["files"], servers["web"]
    assert (files.transport, files.command, files.args, dict(files.env)) == ("stdio", "npx", ("-y", "fs"), {"K": "v"})
    assert files.auto_approve == ("read",)
    assert (web.transport, web.url, web.disabled) == ("http", "http://127.0.0.1:3000/mcp", True)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({}, "expected 'command'"),
        ({"command": "x", "args": "not a list"}, "'args' must be a list"),
        ({"url": "ftp://x"}, "expected 'command'"),
        ({"command": "x", "env": ["A"]}, "'env' must be a table"),
        ("nope", "expected a table"),
    ],
)
def test_a_wrong_entry_is_a_config_error_naming_the_server(entry: object, says: str) -> None:
    with pytest.raises(ConfigError, match=f"MCP server 'bad' in here: {says}"):
        parse_server("bad", entry, where="here")


def test_the_config_files_mcpservers_table_and_mcp_json_are_both_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[mcpServers.a]\ncommand = "server-a"\n[mcpServers.b]\nurl = "https://b.example/mcp"\n')
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"a": {"command": "old"}, "c": {"command": "c"}}}))
    monkeypatch.setenv("LOCALINFER_CONFIG", str(config))
    servers = configured_servers(Settings())
    assert {n: s.command or s.url for n, s in servers.items()} == {
        "a": "server-a",  # the settings win over mcp.json
        "c": "c",
        "b": "https://b.example/mcp",
    }


def test_other_apps_configs_are_found_where_they_keep_them(tmp_path: Path) -> None:
    claude = tmp_path / ".config" / "Claude" / "claude_desktop_config.json"
    cursor = tmp_path / "project" / ".cursor" / "mcp.json"
    for path in (claude, cursor):
        path.parent.mkdir(parents=True)
        path.write_text('{"mcpServers": {}}')
    found = known_configs(tmp_path, tmp_path / "project", {}, platform="linux")
    assert [(c.app, c.path) for c in found] == [("Claude Desktop", claude), ("Cursor (this project)", cursor)]
    mac = known_configs(tmp_path, tmp_path, {}, platform="darwin")
    assert mac == []


def test_merge_keeps_a_name_already_there_unless_replace(tmp_path: Path) -> None:
    source = tmp_path / "lmstudio.json"
    source.write_text(json.dumps({"mcpServers": {"a": {"command": "new"}, "b": {"command": "b"}}}))
    current = parse_servers({"a": {"command": "mine"}}, where="mcp.json")
    merged, imported = merge(current, [ForeignConfig("LM Studio", source)])
    assert merged["a"].command == "mine" and set(imported.added) == {"b"} and imported.skipped == {"a": "LM Studio"}
    replaced, _ = merge(current, [ForeignConfig("LM Studio", source)], replace=True)
    assert replaced["a"].command == "new"


def localinfer(tmp_path: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCALINFER_HOME": str(tmp_path / "home"), "LOCALINFER_CONFIG": str(config)}
    return subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_mcp_import_copies_a_claude_desktop_config_and_ls_shows_it_without_secrets(tmp_path: Path) -> None:
    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "npx", "args": ["-y", "server-files", "/tmp"], "env": {"KEY": "abc123"}},
                    "web": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer zzz"}},
                }
            }
        ),
        encoding="utf-8",
    )
    config = tmp_path / "cfg" / "config.toml"
    imported = localinfer(tmp_path, config, "mcp", "import", str(claude))
    assert imported.returncode == 0, imported.stderr
    written = json.loads((config.parent / "mcp.json").read_text(encoding="utf-8"))
    assert written["mcpServers"]["files"]["env"] == {"KEY": "abc123"}
    assert (config.parent / "mcp.json").stat().st_mode & 0o077 == 0  # it may hold secrets: its owner's only
    listed = localinfer(tmp_path, config, "mcp", "ls")
    assert "files  stdio  npx -y server-files /tmp (env KEY set)" in listed.stdout
    assert "web    http   https://example.com/mcp (header Authorization set)" in listed.stdout
    assert "abc123" not in listed.stdout + imported.stdout and "zzz" not in listed.stdout + imported.stdout
    again = localinfer(tmp_path, config, "mcp", "import", str(claude))
    assert "kept files" in again.stdout and "0 server(s) imported" in again.stdout
