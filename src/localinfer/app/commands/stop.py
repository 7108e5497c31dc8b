"""``localinfer stop MODEL``: unload a model from a running ``localinfer serve`` now, as ``ollama stop``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from localinfer.app.commands.running_server import add_server_arguments, server_client

if TYPE_CHECKING:
    import argparse

    from localinfer.client.remote import HttpClient
    from localinfer.config import Settings


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "stop",
        help="unload a model from a running server",
        description="Unload MODEL from a running 'localinfer serve' once its requests in flight have ended "
        "(at once when there are none). It loads again on the next request that names it.",
    )
    p.add_argument("model", metavar="MODEL", help="a loaded model (localinfer ps)")
    add_server_arguments(p)
    p.set_defaults(run=run)


async def _stop(client: HttpClient, model: str) -> bool:
    try:
        return await client.unload(model)
    finally:
        await client.close()


def run(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    if asyncio.run(_stop(server_client(args, settings), args.model)):
        print(f"unloading {args.model}")
        return 0
    print(f"{args.model} is not loaded")
    return 1
