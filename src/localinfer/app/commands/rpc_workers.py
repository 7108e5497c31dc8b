"""RPC workers as the commands see them: ``serve``'s flags for them and its check that they answer, and the line
``hw`` prints for lending this machine as one (``localinfer rpc`` is the worker itself)."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from localinfer.backends.llamacpp.rpc.wire import DEFAULT_PORT, SAFE_WAYS, parse_endpoints, remote_devices
from localinfer.hardware.layer_split import parse_tensor_split

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings
    from localinfer.hardware.rpc_devices import RemoteDevice


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """``serve``'s flags for RPC workers (llama-server's)."""
    p.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        help="llama.cpp RPC workers ('localinfer rpc' on other machines) whose devices take a share of the "
        "offloaded layers (all layers unless --gpu-layers N); unauthenticated: use loopback, an SSH tunnel or a "
        "private network",
    )
    p.add_argument(
        "--tensor-split",
        "-ts",
        metavar="N[,N...]",
        help="shares of the offloaded layers per device, the RPC workers first, then the local GPUs "
        "(default: by free memory)",
    )


def check_workers(settings: Settings) -> tuple[RemoteDevice, ...]:
    """Every RPC worker in the settings answers and speaks our protocol; their devices, with the memory each
    offers now (before any model is loaded onto them), which the planner splits layers by. Raises RpcWorkerError
    (naming the first that does not answer) or ConfigError (an address that is not one)."""
    parse_tensor_split(settings.tensor_split)
    return remote_devices(parse_endpoints(settings.rpc))


def lan_address() -> str:
    """This machine's address on its network (the one a route to the outside leaves from; nothing is sent),
    127.0.0.1 when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: a route lookup only
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def paste_line() -> str:
    """What ``hw`` prints: how to lend this machine, and the flag to paste on the main machine."""
    address = lan_address()
    return (
        f"localinfer rpc --host {address}   then on the main machine: --rpc {address}:{DEFAULT_PORT} "
        f"(unauthenticated: or {SAFE_WAYS})"
    )
