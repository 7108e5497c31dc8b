"""``localinfer serve [MODEL]``: the OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import Any

import uvicorn
from pydantic import SecretStr

from localinfer.app.commands.pull import ProgressLine, machine_fits
from localinfer.app.server.app import create_app
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.backends import check_files
from localinfer.engine.engine import Engine
from localinfer.errors import ConfigError
from localinfer.hardware.detect import detect
from localinfer.models.library import ModelLibrary
from localinfer.models.pull import ensure_model


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="serve a model over the OpenAI API", description="Serve a model over the OpenAI API."
    )
    p.add_argument(
        "model",
        nargs="?",
        help="a model name (localinfer ls), a .gguf path, an ONNX (onnxruntime-genai) model folder, or a Hub "
        "reference or catalog name to pull first (default: the starter model)",
    )
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 8080)")
    p.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on every route but /health")
    p.add_argument("--ctx-size", type=int, help="context length per request (default: the model's, up to 8192)")
    p.add_argument("--threads", type=int, help="CPU threads (default: one per physical core)")
    p.add_argument("--parallel", type=int, help="requests decoded together (slots; default: up to 4, as memory allows)")
    p.add_argument("--max-queue", type=int, help="requests that may wait for a slot before the server says 503")
    p.add_argument("--gpu-layers", type=int, help="layers to offload to the GPU (-1: all; default: as many as fit)")
    p.set_defaults(run=run)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace, settings: Settings) -> int:
    settings = settings.with_overrides(
        host=args.host,
        port=args.port,
        api_key=SecretStr(args.api_key) if args.api_key else None,
        ctx_size=args.ctx_size,
        threads=args.threads,
        parallel=args.parallel,
        max_queue=args.max_queue,
        gpu_layers=args.gpu_layers,
        model=args.model,
    )
    api_key = settings.api_key.get_secret_value() if settings.api_key else None
    if not is_loopback(settings.host) and not api_key:
        raise ConfigError(
            f"refusing to listen on {settings.host} without an API key: anyone on the network could use it",
            hint="set one with --api-key KEY or LOCALINFER_API_KEY=KEY, or bind 127.0.0.1",
        )
    library = ModelLibrary.from_settings(settings)
    hardware = detect()
    progress = ProgressLine(sys.stderr)
    try:
        manifest = ensure_model(library, settings.model, settings, progress=progress, fits=machine_fits(hardware))
    finally:
        progress.close()
    check_files(manifest)  # a corrupt or truncated model fails here, in one line, not in the background
    engine = Engine(settings, library, hardware=hardware)
    url = f"http://{settings.host}:{settings.port}"
    client = LocalClient(engine, library, settings, serving=url)
    app = create_app(engine, api_key=api_key, preload=manifest, client=client)
    print(f"localinfer: serving {manifest.name} on {url}/v1", flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False)
    return 0
