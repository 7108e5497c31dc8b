"""Whether the RPC workers a child server computes on are still there, asked while its stream stalls, without
taking them for gone when they are only busy.

A worker serves one client at a time (``listen(fd, 1)`` in ggml-rpc's transport): while the child holds it, a new
connection waits in the worker's accept queue, which holds two; one more is not answered at all, and its connect
times out. So a connect that times out says nothing (the worker may be busy), and each connection that was taken
stays in that queue, closed or not, until the child lets the worker go. The watch therefore:

- holds one connection per worker (its *probe*), opened as soon as the child runs, with TCP keepalive: a worker
  whose process dies resets it, and one cut off the network or powered off stops answering its keepalives, which
  ends it (``ETIMEDOUT``) within about ``KEEPALIVE_IDLE + KEEPALIVE_COUNT * KEEPALIVE_INTERVAL`` seconds;
- and at each check also connects afresh, where only an answer that the port is closed or the host unreachable
  (``ECONNREFUSED``, ``EHOSTUNREACH``, ``ENETUNREACH``) counts: a timeout is a full queue, not a lost worker.
  That connection is reset at once (so it lingers on neither side) and, being in the queue, is read as an empty
  client by the worker once it is free.

``close`` drops the probes: call it before the child stops, or the freed worker would take a probe for its next
client and wait on it.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from localinfer.backends.llamacpp.rpc.wire import split_endpoint

REACH_TIMEOUT = 2.0  # seconds a fresh connection to a worker has to be taken (or refused)
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 2, 1, 3  # a probe's TCP keepalive: seconds, seconds, probes
GONE_ERRNOS = {
    errno.ECONNREFUSED: "it refuses connections (nothing listens on its port)",
    errno.EHOSTUNREACH: "its host cannot be reached",
    errno.ENETUNREACH: "its network cannot be reached",
}


class WorkerWatch:
    """Probes of the workers at ``endpoints`` (see the module's docstring). Thread-safe."""

    def __init__(self, endpoints: Sequence[str], *, timeout: float = REACH_TIMEOUT) -> None:
        self._endpoints = tuple(endpoints)
        self._timeout = timeout
        self._probes: dict[str, socket.socket] = {}
        self._lock = threading.Lock()

    def hold(self) -> None:
        """Open a probe to each worker that takes one now (one that does not is asked again at each check)."""
        with self._lock:
            for endpoint in self._endpoints:
                if endpoint not in self._probes:
                    self._open(endpoint)

    def gone(self) -> dict[str, str]:
        """The workers that are gone, each with why: its probe failed, or a fresh connection was refused or found
        no route. Never a worker that is only busy. Takes up to ``timeout`` seconds (the workers are asked at once)."""
        with self._lock:
            if not self._endpoints:
                return {}
            with ThreadPoolExecutor(len(self._endpoints)) as pool:
                whys = list(pool.map(self._check, self._endpoints))
            return {endpoint: why for endpoint, why in zip(self._endpoints, whys, strict=True) if why}

    def close(self) -> None:
        """Close every probe."""
        with self._lock:
            for probe in self._probes.values():
                probe.close()
            self._probes.clear()

    def _check(self, endpoint: str) -> str | None:
        probe = self._probes.get(endpoint)
        if probe is not None:
            why = _broken(probe)
            if why is not None:
                probe.close()
                del self._probes[endpoint]
                return why
        try:
            fresh = socket.create_connection(split_endpoint(endpoint), timeout=self._timeout)
        except OSError as exc:
            return GONE_ERRNOS.get(exc.errno or 0)  # None for a timeout: a busy worker's queue is full
        if endpoint not in self._probes:
            self._keep(endpoint, fresh)
        else:
            _reset(fresh)
        return None

    def _open(self, endpoint: str) -> None:
        with contextlib.suppress(OSError):  # asked again at the next check, where a refusal counts
            self._keep(endpoint, socket.create_connection(split_endpoint(endpoint), timeout=self._timeout))

    def _keep(self, endpoint: str, probe: socket.socket) -> None:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (
            ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
            ("TCP_KEEPALIVE", KEEPALIVE_IDLE),  # macOS's name for it
            ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
            ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ):
            option = getattr(socket, name, None)
            if option is not None:
                with contextlib.suppress(OSError):  # a platform without it: its defaults (hours) then
                    probe.setsockopt(socket.IPPROTO_TCP, option, value)
        probe.setblocking(False)
        self._probes[endpoint] = probe


def _broken(probe: socket.socket) -> str | None:
    """Why ``probe`` failed (reset, keepalives unanswered, closed by the worker), None while it is open."""
    try:
        data = probe.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno == errno.ETIMEDOUT:
            return "it stopped answering (its connection's keepalives went unanswered)"
        return f"its connection failed ({exc.strerror or exc})"
    return "it closed its connection" if data == b"" else None


def _reset(connection: socket.socket) -> None:
    """Close ``connection`` with a reset rather than a FIN, so that nothing of it waits on this side."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()
