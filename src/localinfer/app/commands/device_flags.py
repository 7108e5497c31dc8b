"""The flags of ``serve`` that say where a GGUF model computes (llama-server's ``--device``, ``--list-devices``,
``--no-kv-offload``, ``--no-op-offload``) and how a prompt's last token is computed (``--last-token-alone``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_device_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        "-dev",
        metavar="LIST",
        help="GGUF models: the devices layers may be offloaded to, comma-separated (CUDA0,CUDA1; see "
        "--list-devices), or none for the CPU alone; default every GPU, or none with --gpu-layers 0 (so a model "
        "kept on the CPU holds no GPU memory)",
    )
    p.add_argument(
        "--list-devices", action="store_true", help="list the devices GGUF models can be offloaded to, and exit"
    )
    p.add_argument(
        "--no-kv-offload",
        "-nkvo",
        action="store_true",
        default=None,
        help="GGUF models: keep the KV cache of offloaded layers in host memory, as llama-server's",
    )
    p.add_argument(
        "--no-op-offload",
        action="store_true",
        default=None,
        help="GGUF models: compute large batches of the layers kept on the CPU there, not on a GPU, as llama-server's",
    )
    p.add_argument(
        "--last-token-alone",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="GGUF models: compute a prompt's last token in a step of its own, as when the rest is cached, so "
        "greedy text is the same cold and cached (default: on; --no-last-token-alone computes it with the rest, "
        "as llama-server does)",
    )


def device_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings these flags give (None: not given, the setting stays)."""
    return {
        "device": args.device,
        "kv_offload": False if args.no_kv_offload else None,
        "op_offload": False if args.no_op_offload else None,
        "last_token_alone": args.last_token_alone,
    }


def check_devices(text: str) -> None:
    """Refuse, before anything starts, a ``--device`` list naming a device llama.cpp does not know (ConfigError)."""
    from localinfer.backends.llamacpp.devices import parse_devices, resolve

    names = parse_devices(text)
    if names:
        resolve(names)


def list_devices() -> int:
    """``serve --list-devices``: print llama.cpp's devices, as llama-server does."""
    from localinfer.backends.llamacpp.devices import listing

    print("\n".join(listing()))
    return 0
