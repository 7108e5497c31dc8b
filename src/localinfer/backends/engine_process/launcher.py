"""An engine's OpenAI server (``vllm serve``, SGLang, TGI, ``trtllm-serve``...) as a child process: started,
waited for, and stopped with its group.

The child listens on 127.0.0.1 on a free port and, where the engine checks one, requires a key generated here, so
only this process talks to it. It runs in a process group of its own (a new session on Linux and macOS,
``CREATE_NEW_PROCESS_GROUP`` on Windows, best effort) so that stopping it also stops the workers it forks; a
finalizer stops it when the ``EngineProcess`` is collected or the interpreter exits, so an exiting localinfer
leaves no child behind. A
localinfer that is killed (SIGKILL, the OOM killer) runs no finalizer: on Linux the kernel then sends the child
SIGTERM (``PR_SET_PDEATHSIG``), and the engines stop their own workers on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
import psutil

from localinfer.backends.engine_process.recipe import LOCALHOST, Launch, LaunchFor
from localinfer.errors import ModelLoadError

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 20
EXIT_GRACE = 5.0  # seconds a child gets to stop when localinfer exits without stopping it


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port free on ``host`` right now (another process may still take it before the child binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class EngineProcess:
    """One engine server process. ``start`` it, ``await wait_ready``, then talk to ``url`` with ``api_key``.

    ``launch(port, key)`` says what to run once the port is chosen and the key generated (``Recipe.launch``, or
    ``openai_server`` for a command that takes ``--host``/``--port`` and reads its key from the environment). The
    key goes in the environment where the engine reads it there, not on the command line, where any local user
    could read it. Stdout and stderr go to ``log_path``. ``env`` is the base environment (None: this process's).
    """

    def __init__(self, launch: LaunchFor, *, log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.launch_for = launch
        self.log_path = log_path
        self.api_key = self.new_key()
        self.port = 0
        self.launch: Launch | None = None
        self._env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., EngineProcess] | None = None

    @staticmethod
    def new_key() -> str:
        """A key for one engine process: 64 hex digits, so it never starts with '-' (a command line would take it
        for a flag) and needs no quoting anywhere."""
        return secrets.token_hex(32)

    @property
    def url(self) -> str:
        return f"http://{LOCALHOST}:{self.port}"

    @property
    def argv(self) -> list[str]:
        """The command line run (empty before ``start``)."""
        return list(self.launch.argv) if self.launch is not None else []

    @property
    def pid(self) -> int | None:
        """The child's pid, which is also its process group id; None before ``start``."""
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        """Started and not exited."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the child. Raises ModelLoadError when the command cannot be run (not found, not executable)."""
        if self._process is not None:
            raise RuntimeError("the engine process was already started")
        self.port = free_port()
        self.launch = launch = self.launch_for(self.port, self.api_key)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        creationflags = 0
        if sys.platform == "win32":  # pragma: no cover - untested: best effort
            creationflags = subprocess.CREATE_NEW_PROCESS_GROUP
        try:
            with self.log_path.open("wb") as out:
                process = subprocess.Popen(
                    list(launch.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**(self._env if self._env is not None else os.environ), **launch.env},
                    start_new_session=sys.platform != "win32",
                    creationflags=creationflags,
                    preexec_fn=_stop_with_parent if sys.platform == "linux" else None,
                )
        except OSError as exc:
            raise ModelLoadError(
                f"cannot start the engine '{launch.argv[0]}': {exc}", hint="check that the engine is installed"
            ) from exc
        self._process = process
        self._finalizer = weakref.finalize(self, shutdown, process, EXIT_GRACE)
        log.info("engine started (pid %d) on %s, log %s", process.pid, self.url, self.log_path)

    async def wait_ready(self, timeout: float) -> None:
        """Wait until each of the launch's ready paths (``GET /health``, ``GET /v1/models``) answers 200.

        Raises ModelLoadError, quoting the end of the child's log, when the child exits first, or when it is not
        ready after ``timeout`` seconds (then the child is stopped first).
        """
        process = self._require_started()
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Bearer {self.api_key}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=2.0) as client:
            while True:
                code = process.poll()
                if code is not None:
                    raise ModelLoadError(
                        f"the engine exited with code {code} before it was ready:\n{self.log_tail()}",
                        hint=f"its whole log is in {self.log_path}",
                    )
                if await _answers(client, self.launch.ready_paths if self.launch else ()):
                    log.info("engine ready (pid %d) on %s", process.pid, self.url)
                    return
                if time.monotonic() > deadline:
                    await self.stop(grace=2.0)
                    raise ModelLoadError(
                        f"the engine was not ready after {timeout:g} seconds:\n{self.log_tail()}",
                        hint=f"its whole log is in {self.log_path}; a large model may need a longer wait",
                    )
                await asyncio.sleep(0.1)

    async def stop(self, grace: float = 10.0) -> None:
        """Stop the child and everything in its process group: SIGTERM, up to ``grace`` seconds, then SIGKILL.

        Descendants that left the group are killed too. Returns once the child is reaped; does nothing when
        it was never started or is already stopped.
        """
        if self._process is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        await asyncio.to_thread(shutdown, self._process, grace)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the child's log ("" when there is none yet)."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _require_started(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError("the engine process was not started")
        return self._process


def openai_server(command: Sequence[str], extra_args: Sequence[str] = (), *, key_env: str | None = None) -> LaunchFor:
    """A launch of ``command --host 127.0.0.1 --port PORT *extra_args``, the key in ``key_env`` when given."""

    def for_port(port: int, key: str) -> Launch:
        argv = (*command, "--host", LOCALHOST, "--port", str(port), *extra_args)
        return Launch(argv, {key_env: key} if key_env else {})

    return for_port


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _stop_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """Ask the kernel to send this (child) process SIGTERM when the thread that started it ends, which for the event
    loop's thread is when localinfer exits or is killed. Best effort: a failure leaves the finalizer alone."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


async def _answers(client: httpx.AsyncClient, paths: Sequence[str]) -> bool:
    try:
        return all([(await client.get(path)).status_code == 200 for path in paths])
    except httpx.TransportError:
        return False


def shutdown(process: subprocess.Popen[bytes], grace: float) -> None:
    """Stop ``process`` and its group (see ``EngineProcess.stop``); blocks until the child is reaped."""
    if process.returncode is not None and not _group_alive(process.pid):
        return
    descendants = _descendants(process.pid)
    _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (process.poll() is None or _group_alive(process.pid)):
        time.sleep(0.05)
    _signal_group(process, signal.SIGTERM if sys.platform == "win32" else signal.SIGKILL)
    for child in descendants:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(descendants, timeout=5)  # a killed process is gone only once the kernel has reaped it
    process.wait()
    log.info("engine stopped (pid %d, exit code %s)", process.pid, process.returncode)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if sys.platform == "win32":  # pragma: no cover - untested
        if process.poll() is None:
            process.send_signal(signal.CTRL_BREAK_EVENT if sig == signal.SIGTERM else signal.SIGTERM)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):  # none left in the group (macOS: EPERM)
        os.killpg(process.pid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any process (a zombie leader included) is still in process group ``pgid``."""
    if sys.platform == "win32":  # pragma: no cover - untested
        return psutil.pid_exists(pgid)
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
