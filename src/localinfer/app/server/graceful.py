"""A uvicorn server that stops well: on SIGTERM or SIGINT it stops accepting connections, lets running requests
finish for a grace period, then has them ended properly, and exits; a second signal exits at once.

uvicorn alone waits for open connections forever (a stream of 4,000 tokens keeps it alive for minutes), and the
app's lifespan shutdown, which unloads the models, runs only once every connection has closed. Here the first
signal also starts a timer: when the grace period is over, ``end_requests`` runs (the engine's ``shutdown``,
which ends every generation with ServerShuttingDown, so each stream writer sends its last event with the error and
each waiting request gets a 503), the connections close, and uvicorn goes on to the lifespan shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType

import uvicorn

from localinfer.errors import ConfigError

log = logging.getLogger(__name__)

# After the grace period, the time ending the requests may take before uvicorn cancels what is left (a stream
# writer that did not notice): ending them takes one step of the engine.
ENDING_MARGIN_SECONDS = 2.0

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class GracefulServer(uvicorn.Server):
    """A uvicorn server whose stop gives running requests ``grace`` seconds, then awaits ``end_requests``."""

    def __init__(self, config: uvicorn.Config, *, grace: float, end_requests: Callable[[], Awaitable[None]]) -> None:
        config.timeout_graceful_shutdown = grace + ENDING_MARGIN_SECONDS  # type: ignore[assignment]
        super().__init__(config)
        self._grace = grace
        self._end_requests = end_requests
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ending: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def stop(self) -> None:
        """Begin a graceful stop, as the first signal does; a second call does nothing more. Call it on the
        server's event loop."""
        if self._ending is not None:
            return
        self.should_exit = True
        log.info("stopping: running requests have %gs to finish (another Ctrl-C or SIGTERM stops at once)", self._grace)
        self._ending = asyncio.get_running_loop().create_task(self._end_after_grace(), name="end requests")

    async def _end_after_grace(self) -> None:
        await asyncio.sleep(self._grace)
        log.info("ending the requests still running")
        await self._end_requests()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """As uvicorn's, except that the signal is not raised again once the server has stopped: a graceful stop
        is a normal exit (status 0)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The first signal begins a graceful stop; the next one ends the process at once."""
        if self._ending is not None or self.should_exit:
            force_exit(sig)
        self.should_exit = True  # uvicorn stops accepting at its next tick, even before ``stop`` runs
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.stop)


def force_exit(sig: int) -> None:
    """End the process now, saying so in one line: no traceback, no cleanup. What the model store holds stays
    whole (it is written by atomic renames; a download keeps its partial file for a resume)."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
        sys.stdout.flush()
    os.write(2, f"localinfer: {signal.Signals(sig).name} again: stopped at once\n".encode())
    os._exit(128 + sig)


def bind(hosts: list[str], port: int) -> list[socket.socket]:
    """A listening socket on ``port`` at each of ``hosts`` (llama-server's ``--host a,b``). Raises ConfigError
    naming the address that cannot be bound."""
    sockets: list[socket.socket] = []
    for host in hosts:
        address = host.strip("[]")
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
        except OSError as exc:
            sock.close()
            for bound in sockets:
                bound.close()
            raise ConfigError(
                f"cannot listen on {host}:{port}: {exc.strerror}",
                hint="check the address is this machine's and no other process uses the port",
            ) from None
        sock.listen(2048)
        sock.set_inheritable(True)
        sockets.append(sock)
    return sockets
