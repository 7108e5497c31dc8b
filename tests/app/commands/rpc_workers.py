"""Real ``localinfer rpc`` workers for the tests: started on a free port of 127.0.0.1 (or a given one) and stopped."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from localinfer.backends.llamacpp.rpc.wire import _session
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


@contextmanager
def held(port: int) -> Iterator[None]:
    """The worker on ``port`` serving one client, as a child server's llama.cpp holds it while its model is loaded:
    a connection it took (the handshake answered) and keeps until the block ends."""
    with _session(f"127.0.0.1:{port}", 30.0):
        yield


class FreezableLink:
    """A TCP relay on 127.0.0.1 in front of a worker whose ``freeze`` stands for a worker cut off the network:
    open connections stay open and carry nothing more, and new ones are refused (its listener is closed)."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._frozen = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._frozen.set()
        with suppress(OSError):  # a listener closed while accept() waits on it would still listen: shut it first
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def close(self) -> None:
        self.freeze()
        for s in self._sockets:
            with suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._frozen.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                if self._frozen.is_set():
                    return  # held: what was sent never arrives, and the connection stays open
                sink.sendall(data)
            if not self._frozen.is_set():
                sink.shutdown(socket.SHUT_WR)
