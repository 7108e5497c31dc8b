"""``localinfer ps``: the models a running ``localinfer serve`` has loaded, as ``ollama ps`` shows them."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.running_server import add_server_arguments, server_client

if TYPE_CHECKING:
    import argparse

    from localinfer.client.base import ClientStatus, LoadedModelStatus
    from localinfer.client.remote import HttpClient
    from localinfer.config import Settings

_MB = 1_000_000


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "ps",
        help="list the models a running server has loaded",
        description="List the models a running 'localinfer serve' has loaded: memory, backend, context, slots, "
        "and when each is unloaded if no request comes (its keep-alive).",
    )
    add_server_arguments(p)
    p.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    p.set_defaults(run=run)


async def _status(client: HttpClient) -> ClientStatus:
    try:
        return await client.status()
    finally:
        await client.close()


def run(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    status = asyncio.run(_status(server_client(args, settings)))
    if args.json:
        print(json.dumps([asdict(m) for m in status.loaded], indent=2))
    else:
        print(render_table(status.loaded))
    return 0


def _layers(m: LoadedModelStatus) -> str:
    """`` (31 GPU layers)``; layers on RPC workers are on other machines' devices, which may be CPUs: ``offloaded``."""
    if not m.gpu_layers:
        return ""
    return f" ({m.gpu_layers} {'offloaded' if m.on_rpc_workers else 'GPU'} layers)"


def render_table(models: tuple[LoadedModelStatus, ...]) -> str:
    if not models:
        return "no model is loaded"
    header: tuple[str, ...] = ("NAME", "MEMORY", "PROCESSOR", "BACKEND", "CONTEXT", "KV CACHE", "SLOTS", "UNTIL")
    rows: list[tuple[str, ...]] = [
        (
            m.name,
            f"{(m.memory_bytes or m.size_bytes) / _MB:.0f} MB",
            m.placement(),
            m.backend + _layers(m),
            str(m.context_length),
            m.kv_cache(),
            str(m.slots),
            m.until(),
        )
        for m in models
    ]
    if any(m.adapters for m in models):  # LoRA adapters loaded with a model, at their global scales
        header = (*header, "ADAPTERS")
        rows = [(*row, m.lora() or "-") for row, m in zip(rows, models, strict=True)]
    if any(m.devices for m in models):  # a model over RPC workers: the devices it spans, and what each holds
        header = (*header, "DEVICES")
        rows = [(*row, m.spans() or "-") for row, m in zip(rows, models, strict=True)]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in (header, *rows)
    )
