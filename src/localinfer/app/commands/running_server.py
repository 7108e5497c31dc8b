"""The running ``localinfer serve`` a command asks (``ps``, ``stop``, ``run``): its flags and its client."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from localinfer.client.remote import HttpClient
    from localinfer.config import Settings


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """``--url`` and ``--api-key``: the running server to ask."""
    p.add_argument("--url", help="the running 'localinfer serve' (default: http://HOST:PORT from the settings)")
    p.add_argument("--api-key", help="the key that server asks for (LOCALINFER_API_KEY)")


def server_client(args: argparse.Namespace, settings: Settings) -> HttpClient:
    from localinfer.client.remote import HttpClient

    url = args.url or f"http://{settings.host}:{settings.port}"
    key = args.api_key or (settings.api_key.get_secret_value() if settings.api_key else None)
    return HttpClient(url, api_key=key)
