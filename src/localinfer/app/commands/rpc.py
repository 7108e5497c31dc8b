"""``localinfer rpc``: lend this machine's devices to a ``localinfer serve --rpc`` (or ``llama-server --rpc``)
elsewhere, with llama.cpp's own RPC server; and the checks ``serve`` makes of its workers before anything loads."""

from __future__ import annotations

import socket
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.rpc_workers import lan_address
from localinfer.app.server.guard import is_loopback_name
from localinfer.backends.llamacpp.rpc.wire import (
    DEFAULT_PORT,
    SAFE_WAYS,
)
from localinfer.errors import ConfigError

if TYPE_CHECKING:
    import argparse

    from localinfer.backends.llamacpp.rpc.devices import Device
    from localinfer.config import Settings

UNSAFE_FLAG = "--i-know-this-is-unauthenticated"


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "rpc",
        help="lend this machine's devices to a 'localinfer serve --rpc' elsewhere",
        description="Serve this machine's devices (GPUs, or the CPU where there is none) to a 'localinfer serve "
        "--rpc HOST:PORT' (or llama-server --rpc) on another machine, which then puts some of a model's layers "
        "here: llama.cpp's RPC backend. The protocol has no authentication or encryption: anyone who reaches the "
        f"port can use the devices and send it data. It listens on 127.0.0.1 unless told otherwise; reach it "
        f"through {SAFE_WAYS}.",
    )
    p.add_argument("--host", "-H", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", "-p", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    p.add_argument("--threads", "-t", type=int, help="CPU threads for the CPU device (default: one per core)")
    p.add_argument(
        "--device",
        "-d",
        metavar="DEV[,DEV]",
        help="devices to lend, by llama.cpp's names (CPU, CUDA0, Vulkan0...), or 'all' (default: the GPUs, or the "
        "CPU where there is none, as rpc-server)",
    )
    p.add_argument(
        "--cache",
        nargs="?",
        const="",
        metavar="DIR",
        help="keep the tensors received in DIR (default with no DIR: HOME/rpc-cache), so a model's weights cross "
        "the network once and later loads read them here",
    )
    p.add_argument(
        "--mem",
        "-m",
        type=_size,
        metavar="SIZE",
        help="offer at most SIZE of each device's memory (512M, 8G; a bare number is MiB, as rpc-server's former "
        "-m): the main machine shares the layers by what each worker offers",
    )
    p.add_argument(
        UNSAFE_FLAG,
        dest="unauthenticated",
        action="store_true",
        help="allow listening on every address (0.0.0.0, ::)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Lend the devices until SIGTERM or Ctrl+C (exit 0). Raises ConfigError for an unsafe or unusable address,
    an unknown device, or llama.cpp without its RPC backend."""
    where = exposure(args.host)
    if where == "everywhere" and not args.unauthenticated:
        raise ConfigError(
            f"refusing to listen on every address ({args.host or 'all'}): the RPC protocol has no authentication",
            hint=f"bind one address (--host 192.168.1.5), or use {SAFE_WAYS}; {UNSAFE_FLAG} to insist",
        )
    if where != "loopback":
        print(
            f"localinfer rpc: warning: anyone who reaches {args.host}:{args.port} can use these devices (no "
            f"authentication); prefer {SAFE_WAYS}",
            file=sys.stderr,
        )
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port} is not a port", hint="e.g. --port 50052")
    _check_free(args.host, args.port)
    from localinfer.backends.llamacpp.model import default_threads
    from localinfer.backends.llamacpp.rpc import devices as rpc

    lent = _chosen_devices(rpc.devices(), args.device)
    if args.mem is not None:
        from localinfer.backends.llamacpp.rpc.memory_cap import cap_reported_memory

        for device in lent:
            cap_reported_memory(device.handle, args.mem)
        lent = [replace(d, free=min(d.free, args.mem), total=min(d.total, args.mem)) for d in lent]
    cache = _cache_dir(args.cache, settings)
    threads = args.threads or default_threads()
    endpoint = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    names = ", ".join(f"{d.name} ({d.description}, {d.free >> 20} MiB free)" for d in lent)
    print(f"localinfer rpc: lending {names} on {endpoint}", flush=True)
    print(f"on the main machine: localinfer serve MODEL --rpc {_paste_address(args.host)}:{args.port}", flush=True)
    return _serve_until_signal(lambda: rpc.lend(endpoint, cache, threads, lent), endpoint)


def _serve_until_signal(serve: Any, endpoint: str) -> int:
    """Run ``serve`` (it blocks in llama.cpp) in a thread; SIGTERM, SIGINT or SIGHUP end the process with 0,
    without waiting for it (it cannot be stopped), and its returning means it could not start (1)."""
    import os
    import signal

    stop = threading.Event()
    ended = threading.Event()

    def _on_signal(_number: int, _frame: object) -> None:
        stop.set()

    for number in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", signal.SIGTERM)):
        signal.signal(number, _on_signal)

    def _serve() -> None:
        try:
            serve()
        finally:
            ended.set()
            stop.set()

    threading.Thread(target=_serve, name="rpc-server", daemon=True).start()
    stop.wait()  # a signal handler runs while the main thread waits here (lock waits are interruptible on POSIX)
    code = 1 if ended.is_set() else 0
    print(
        f"localinfer rpc: could not serve on {endpoint}" if code else "localinfer rpc: stopped",
        file=sys.stderr if code else sys.stdout,
        flush=True,
    )
    _flush_c_streams()
    os._exit(code)  # llama.cpp's server thread cannot be stopped: end the process without unwinding it


def _flush_c_streams() -> None:
    import ctypes
    from contextlib import suppress

    with suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)  # what llama.cpp printed to a pipe


def _size(text: str) -> int:
    """``512M``, ``8G``, ``1.5G`` or a number of MiB, in bytes."""
    import argparse

    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    cleaned = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(cleaned[-1:], 0)
    number = cleaned[:-1] if scale else cleaned
    try:
        value = int(float(number) * (scale or units["m"]))
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 8G, got {text!r}")
    return value


def _check_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="pick another --port, or check --host is an address of this machine",
        ) from exc


def _chosen_devices(found: list[Device], asked: str | None) -> list[Device]:
    local = [d for d in found if not d.name.startswith("RPC") and d.kind in ("cpu", "gpu", "igpu")]
    if asked is None:
        gpus = [d for d in local if d.kind in ("gpu", "igpu")]
        return gpus or [d for d in local if d.kind == "cpu"][:1]
    if asked.strip().lower() == "all":
        return local
    by_name = {d.name.lower(): d for d in local}
    chosen = []
    for name in (n.strip() for n in asked.replace("/", ",").split(",") if n.strip()):
        if name.lower() not in by_name:
            raise ConfigError(
                f"there is no device {name} here", hint="devices here: " + ", ".join(d.name for d in local)
            )
        chosen.append(by_name[name.lower()])
    if not chosen:
        raise ConfigError("--device names no device", hint="e.g. --device CPU")
    return chosen


def _cache_dir(asked: str | None, settings: Settings) -> Path | None:
    if asked is None:
        return None
    folder = Path(asked).expanduser() if asked else settings.home / "rpc-cache"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot use {folder} as the tensor cache: {exc.strerror}", hint="pick another --cache DIR"
        ) from exc
    return folder


def exposure(host: str) -> str:
    """How far a worker bound to ``host`` can be reached: ``loopback`` (the names and addresses ``serve`` counts as
    loopback: guard.is_loopback_name), ``network`` (one address or name of this machine) or ``everywhere`` (every
    address: 0.0.0.0, ::, or no host)."""
    if host in ("", "0.0.0.0", "::"):
        return "everywhere"
    return "loopback" if is_loopback_name(host.strip("[]").lower()) else "network"


def _paste_address(host: str) -> str:
    """The address the main machine dials: the one bound, or this machine's outward address for every address."""
    if exposure(host) == "everywhere":
        return lan_address()
    return f"[{host}]" if ":" in host else host
