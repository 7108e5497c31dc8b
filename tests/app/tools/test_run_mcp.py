"""``localinfer run MODEL --mcp NAME`` as a script runs it (a subprocess with no terminal), the servers declared
in the config file's ``[mcpServers.NAME]`` table; and ``localinfer mcp import / ls`` on other apps' files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localinfer.models.store import Manifest
from tests.app.tools.conftest import SERVER_SCRIPT

pytestmark = pytest.mark.model
NO_SERVER = "http://127.0.0.1:9"


def config_with_server(tmp_path: Path, name: str = "calc") -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        f"[mcpServers.{name}]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps([str(SERVER_SCRIPT), 'stdio', name])}\n"
        f'env = {{ CALC_TOKEN = "hunter2-secret" }}\n',
        encoding="utf-8",
    )
    return config


def localinfer(tmp_path: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LOCALINFER_HOME": str(tmp_path / "home"),
        "LOCALINFER_CONFIG": str(config),
        "LOCALINFER_DISCOVER": "false",
        "LOCALINFER_CTX_SIZE": "1024",
    }
    return subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # no terminal to ask on, as in a script
    )


def run_args(model: Manifest, tool: str, *extra: str) -> tuple[str, ...]:
    return (
        "run", str(model.path), "Use the tool.", "--mcp", "calc", "--tool-choice", tool, "--max-tokens", "48",
        "--temperature", "0", "--url", NO_SERVER, *extra,
    )  # fmt: skip


def test_run_with_yes_calls_a_read_only_tool_and_answers(smollm2: Manifest, tmp_path: Path) -> None:
    config = config_with_server(tmp_path)
    result = localinfer(tmp_path, config, *run_args(smollm2, "add", "--yes"))
    assert result.returncode == 0, result.stderr
    assert "[tool] calc/add ok: calc: " in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_run_without_a_terminal_denies_a_tool_that_is_not_marked_safe(smollm2: Manifest, tmp_path: Path) -> None:
    config = config_with_server(tmp_path)
    result = localinfer(tmp_path, config, *run_args(smollm2, "echo", "--yes"))
    assert result.returncode == 0, result.stderr
    assert "[tool] calc/echo denied: The user did not approve this call." in result.stderr


def test_run_with_a_server_not_declared_is_one_line(smollm2: Manifest, tmp_path: Path) -> None:
    result = localinfer(tmp_path, tmp_path / "none.toml", "run", str(smollm2.path), "hi", "--mcp", "nope")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("localinfer: no MCP server 'nope' is declared")
