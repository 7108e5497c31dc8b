"""``localinfer run MODEL --mcp NAME`` as a script runs it (a subprocess with no terminal), the servers declared
in the config file's ``[mcpServers.NAME]`` table; and ``localinfer mcp import / ls`` on other apps' files."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
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
    result = localinfer(tmp_path, config, *run_args(smollm2, "touch", "--yes"))
    assert result.returncode == 0, result.stderr
    assert "[tool] calc/touch denied: The user did not approve this call." in result.stderr


def test_run_with_a_server_not_declared_is_one_line(smollm2: Manifest, tmp_path: Path) -> None:
    result = localinfer(tmp_path, tmp_path / "none.toml", "run", str(smollm2.path), "hi", "--mcp", "nope")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("localinfer: no MCP server 'nope' is declared")


def read_until(fd: int, text: str, seen: bytearray) -> None:
    """Read the terminal's output into ``seen`` until it holds ``text`` (the child asked)."""
    while text.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], 120)
        assert ready, f"the terminal never showed {text!r}: {seen.decode(errors='replace')}"
        seen += os.read(fd, 4096)


def test_run_asks_on_the_terminal_and_a_denial_with_a_reason_reaches_the_model(
    smollm2: Manifest, tmp_path: Path
) -> None:
    config = config_with_server(tmp_path)
    master, slave = pty.openpty()

    def on_the_terminal() -> None:  # the child's controlling terminal is the pty: /dev/tty is it
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    env = {
        **os.environ,
        "LOCALINFER_HOME": str(tmp_path / "home"),
        "LOCALINFER_CONFIG": str(config),
        "LOCALINFER_DISCOVER": "false",
        "LOCALINFER_CTX_SIZE": "1024",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "localinfer.app.cli", *run_args(smollm2, "touch")],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=on_the_terminal, pass_fds=(slave,),
    )  # fmt: skip
    os.close(slave)
    seen = bytearray()
    try:
        read_until(master, "run calc/touch touch({})?", seen)
        os.write(master, b"n\n")
        read_until(master, "reason for the model", seen)
        os.write(master, b"too risky\n")
        _, stderr = process.communicate(timeout=300)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "[tool] calc/touch denied: The user denied this call. Their reason: too risky" in stderr
