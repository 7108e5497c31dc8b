"""A TCP proxy that delays every byte by half a round trip each way: a network link simulated on loopback, without
`tc` (no root, no kernel queueing discipline). Bandwidth is not limited and bytes keep their order; a chunk read at
time t is written at t + delay, so a stream of messages stays pipelined as on a real link.

Threads rather than asyncio: asyncio's event loop sleeps in epoll with millisecond resolution, rounded up, so a
0.5 ms one-way delay would become 1 ms or more; a thread's sleep keeps it to tens of microseconds.

Usage: .venv/bin/python bench/delay_proxy.py --listen PORT --to HOST:PORT --rtt-ms 5
(prints "listening on 127.0.0.1:PORT" once it accepts connections; SIGTERM ends it)
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import signal
import socket
import sys
import threading
import time

CHUNK = 1 << 16


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _pipe(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
    """Copy ``src`` to ``dst``, each chunk written ``delay_s`` after it was read; shuts ``dst``'s sending side when
    ``src`` ends."""
    pending: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def writer() -> None:
        while True:
            due, data = pending.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    while True:
        try:
            data = src.recv(CHUNK)
        except OSError:
            data = b""
        pending.put((time.monotonic() + delay_s, data))
        if not data:
            break
    thread.join()


def _serve_pair(client: socket.socket, target: tuple[str, int], delay_s: float) -> None:
    try:
        upstream = socket.create_connection(target)
    except OSError:
        client.close()
        return
    for sock in (client, upstream):
        _nodelay(sock)
    there = threading.Thread(target=_pipe, args=(client, upstream, delay_s), daemon=True)
    there.start()
    _pipe(upstream, client, delay_s)
    there.join()
    client.close()
    upstream.close()


def serve(listen_port: int, target: tuple[str, int], rtt_ms: float) -> None:
    """Accept connections on 127.0.0.1:``listen_port`` and relay each to ``target`` with ``rtt_ms`` / 2 of delay
    each way, until the process ends."""
    with socket.create_server(("127.0.0.1", listen_port)) as listener:
        print(f"listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
        while True:
            client, _ = listener.accept()
            threading.Thread(target=_serve_pair, args=(client, target, rtt_ms / 2000), daemon=True).start()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1 to accept on")
    parser.add_argument("--to", required=True, metavar="HOST:PORT", help="where to relay")
    parser.add_argument("--rtt-ms", type=float, required=True, help="round trip added, in milliseconds")
    args = parser.parse_args()
    host, _, port = args.to.rpartition(":")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(args.listen, (host, int(port)), args.rtt_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
