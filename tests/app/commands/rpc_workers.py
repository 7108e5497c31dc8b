"""Real ``localinfer rpc`` workers for the tests: started on a free port of 127.0.0.1 (or a given one) and stopped."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

from tests.app.server.conftest import free_port


def cli(*args: str, home: Path) -> list[str]:
    return [sys.executable, "-m", "localinfer.app.cli", "--home", str(home), *args]


def start_worker(home: Path, log: Path, port: int | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """A ``localinfer rpc`` on ``port`` (a free one when None), once that port takes connections."""
    port = port or free_port()
    with log.open("ab") as out:
        process = subprocess.Popen(
            cli("rpc", "--port", str(port), "--threads", "1", home=home), stdout=out, stderr=subprocess.STDOUT
        )
    while True:  # until it listens (or dies)
        if process.poll() is not None:
            raise RuntimeError(f"worker exited with {process.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            with suppress(subprocess.TimeoutExpired):  # waits on the worker itself: ends early if it dies
                process.wait(timeout=0.1)


def stop_worker(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=30)
