"""llama.cpp RPC workers as addresses: parsed, checked for what binding them exposes, and asked (over TCP, without
llama.cpp) whether they answer and speak our protocol version, and how much memory their devices have.

This module imports nothing heavy: ``serve`` checks its workers with it before anything loads, and the C client
aborts the whole process on a worker it cannot reach, so nothing reaches llama.cpp unchecked.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from localinfer.errors import ConfigError
from localinfer.hardware.rpc_devices import RemoteDevice, numbered

DEFAULT_PORT = 50052  # rpc-server's
# The protocol of the llama.cpp that llama-cpp-python 0.3.36 vendors (ggml/include/ggml-rpc.h): a worker must
# have the same major version and a minor version no newer. Change with the pin.
PROTOCOL = (7, 0, 0)
_HELLO = 14  # the command number of the handshake; never changes between versions
_GET_DEVICE_MEMORY = 11  # (device: u32) -> (free: u64, total: u64); ggml-rpc.cpp's rpc_cmd numbers
_DEVICE_COUNT = 15  # () -> (count: u32)
_CAPS = 24  # bytes of transport capabilities in the handshake (all zero: plain TCP)
PROBE_TIMEOUT = 5.0  # seconds to connect and be answered; a worker busy with another client answers no one
SAFE_WAYS = "an SSH tunnel (ssh -L 50052:127.0.0.1:50052 worker) or a private network (WireGuard, Tailscale)"


class RpcWorkerError(ConfigError):
    """An RPC worker that cannot be used: unreachable, busy, or speaking another protocol version."""

    def __init__(self, endpoint: str, message: str, *, hint: str) -> None:
        super().__init__(f"RPC worker {endpoint}: {message}", hint=hint)
        self.endpoint = endpoint


def parse_endpoint(text: str) -> str:
    """``host:port`` (``[v6]:port``, or ``host`` for port 50052) as ``host:port``. Raises ConfigError."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep or host.endswith(":"):  # no port, or a bare IPv6 address
        host, port = text, str(DEFAULT_PORT)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"'{text}' is not an RPC worker's address", hint="write HOST:PORT, e.g. 192.168.1.5:50052")
    return f"{host}:{int(port)}"


def parse_endpoints(text: str) -> tuple[str, ...]:
    """A comma-separated list of workers (llama-server's --rpc), each as ``host:port``, without repeats."""
    seen: dict[str, None] = {}
    for part in text.split(","):
        if part.strip():
            seen[parse_endpoint(part)] = None
    return tuple(seen)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def probe(endpoint: str, *, timeout: float = PROBE_TIMEOUT) -> tuple[int, int, int]:
    """Shake hands with the worker at ``endpoint`` as llama.cpp's client does and hang up; its protocol version.
    Raises RpcWorkerError when it cannot be reached, does not answer in ``timeout`` seconds, or speaks a protocol
    llama.cpp here cannot."""
    with _session(endpoint, timeout) as (_, version):
        return version


def device_memory(endpoint: str, *, timeout: float = PROBE_TIMEOUT) -> list[tuple[int, int]]:
    """Free and total bytes of each device the worker at ``endpoint`` lends, as it answers llama.cpp's
    GET_DEVICE_MEMORY (what llama.cpp shares layers by), asked over a connection of our own that is closed after.
    Raises RpcWorkerError as ``probe`` does, or when it breaks off."""
    with _session(endpoint, timeout) as (sock, _):
        try:
            (count,) = struct.unpack("<I", _command(sock, _DEVICE_COUNT, b"", 4))
            return [
                struct.unpack("<QQ", _command(sock, _GET_DEVICE_MEMORY, struct.pack("<I", i), 16)) for i in range(count)
            ]
        except (OSError, ValueError) as exc:
            raise RpcWorkerError(
                endpoint, "broke off when asked its devices' memory", hint=_start_hint(endpoint)
            ) from exc


def remote_devices(endpoints: tuple[str, ...], *, timeout: float = PROBE_TIMEOUT) -> tuple[RemoteDevice, ...]:
    """The devices of the workers at ``endpoints``, named and numbered as llama.cpp registers them in that order,
    with their memory (device_memory). Raises RpcWorkerError naming the first worker that cannot be asked."""
    return numbered([(endpoint, device_memory(endpoint, timeout=timeout)) for endpoint in endpoints])


def _start_hint(endpoint: str) -> str:
    return f"start it there: localinfer rpc --host ADDRESS --port {split_endpoint(endpoint)[1]}"


@contextmanager
def _session(endpoint: str, timeout: float) -> Iterator[tuple[socket.socket, tuple[int, int, int]]]:
    """A connection to the worker at ``endpoint`` after the handshake, and its protocol version; closed after.
    Raises RpcWorkerError (unreachable, silent, not a worker, another protocol)."""
    host, port = split_endpoint(endpoint)
    start = _start_hint(endpoint)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError as exc:
        raise RpcWorkerError(
            endpoint,
            f"no answer in {timeout:g} s (the connection was not taken)",
            hint=f"is it up, and not holding other clients in its queue? {start}",
        ) from exc
    except OSError as exc:
        raise RpcWorkerError(endpoint, f"cannot connect ({exc.strerror or exc})", hint=start) from exc
    with sock:
        try:
            answer = _command(sock, _HELLO, bytes(_CAPS))
        except TimeoutError as exc:
            raise _busy(endpoint, timeout) from exc
        except OSError as exc:
            raise RpcWorkerError(endpoint, f"cannot connect ({exc.strerror or exc})", hint=start) from exc
        except ValueError:
            answer = b""
        if len(answer) < 3:
            raise RpcWorkerError(endpoint, "answered, but not as an RPC worker", hint=f"check the port; {start}")
        version = (answer[0], answer[1], answer[2])
        if version[0] != PROTOCOL[0] or version[1] > PROTOCOL[1]:
            theirs, ours = ".".join(map(str, version)), ".".join(map(str, PROTOCOL))
            raise RpcWorkerError(
                endpoint,
                f"speaks RPC protocol {theirs}, this llama.cpp speaks {ours}",
                hint="run the same localinfer (or llama.cpp) version on every machine",
            )
        yield sock, version


def _busy(endpoint: str, timeout: float) -> RpcWorkerError:
    """A worker that took the connection and gave no handshake: it serves another client (it serves one at a time
    and holds the next in its backlog), or it is stuck."""
    return RpcWorkerError(
        endpoint,
        f"took the connection but gave no handshake in {timeout:g} s: busy with another client (a worker serves "
        "one at a time), or not an RPC worker",
        hint="is another localinfer or llama-server using it? Give each server workers of its own",
    )


def _command(sock: socket.socket, command: int, payload: bytes, expect: int | None = None) -> bytes:
    """Send one RPC command (its number, the payload's size, the payload) and read its answer (a size, then that
    many bytes). Raises OSError (TimeoutError when silent), or ValueError for an answer not ``expect`` long."""
    sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
    size = struct.unpack("<Q", _receive(sock, 8))[0]
    if expect is not None and size != expect:
        raise ValueError(f"an answer of {size} bytes, not {expect}")
    if size > 1 << 16:
        raise ValueError(f"an answer of {size} bytes")
    return _receive(sock, size)


def _receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError(0, "the connection closed during the handshake")
        data += chunk
    return data
