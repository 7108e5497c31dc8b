"""``localinfer run MODEL [PROMPT]``: one answer on stdout, as ``ollama run MODEL PROMPT``.

Piped standard input joins the prompt (``git diff | localinfer run smollm2 "Write a commit message"``). The
answer comes from a running ``localinfer serve`` when one answers at ``--url`` (sharing its loaded models), else
from the engine in this process (the model is loaded for this answer and unloaded after it). A model that is not
here yet is pulled first, as ``ollama run`` does: by the server that answers (its ``/api/pull``), or here, with the
same progress line and choice of file as ``localinfer pull``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.progress_line import ProgressLine
from localinfer.app.commands.running_server import add_server_arguments, server_client
from localinfer.errors import ConfigError
from localinfer.types import ChatMessage, ChatRequest, GenerationOptions

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

    from localinfer.client.base import InferenceClient
    from localinfer.client.remote import HttpClient
    from localinfer.config import Settings
    from localinfer.models.store import Manifest


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="answer one prompt on stdout",
        description="Answer PROMPT (with piped standard input joined to it) with MODEL, printed as it comes. A "
        "running 'localinfer serve' answers when one is up; else the model is loaded in this process. A model not "
        "here yet (a Hub reference, a catalog name, the starter model) is pulled first.",
    )
    p.add_argument(
        "model", metavar="MODEL", help="a model name (localinfer ls), a .gguf path, or a reference to pull first"
    )
    p.add_argument("prompt", nargs="*", metavar="PROMPT", help="the prompt (words are joined with spaces)")
    p.add_argument("--max-tokens", type=int, default=None, help="most tokens in the answer (default: no limit)")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default 0.8)")
    p.add_argument(
        "--mcp",
        action="append",
        metavar="NAME",
        help="offer the tools of this MCP server (localinfer mcp ls); each call is approved on the terminal",
    )
    p.add_argument("--yes", action="store_true", help="--mcp: run the tools marked safe without asking")
    p.add_argument(
        "--tool-choice", metavar="CHOICE", help="--mcp: auto (default), required, or the one tool to call first"
    )
    add_server_arguments(p)
    p.set_defaults(run=run)


def prompt_of(words: list[str], stdin: str | None) -> str:
    """The prompt: the words, then piped input after a blank line (as ``ollama run``)."""
    parts = [" ".join(words).strip(), (stdin or "").strip()]
    return "\n\n".join(part for part in parts if part)


def _server_is_up(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url.rstrip('/')}/health", timeout=1.0).status_code in (200, 503)
    except httpx.HTTPError:
        return False


async def _answer(client: InferenceClient, request: ChatRequest) -> None:
    """Print the answer as it comes."""
    async for chunk in client.chat(request):
        sys.stdout.write(chunk.text)
        sys.stdout.flush()
    sys.stdout.write("\n")


def _in_process(settings: Settings, model: str) -> tuple[InferenceClient, Manifest]:
    """The engine in this process, and the name it knows ``model`` by: a model name, a GGUF path typed at the
    keyboard (registered for this run as ``localinfer serve ./x.gguf`` does), or a reference pulled first."""
    from localinfer.bootstrap import local_stack  # the engine only when no server answers
    from localinfer.hardware.fits import machine_fits
    from localinfer.models.library import ModelLibrary
    from localinfer.models.pull import ensure_model

    library = ModelLibrary.from_settings(settings)
    progress = ProgressLine(sys.stderr)
    try:
        manifest = ensure_model(library, model, settings, progress=progress, fits=machine_fits())
    finally:
        progress.close()
    return local_stack(settings, library=library, served=manifest).client, manifest


def run(args: argparse.Namespace, settings: Settings) -> int:
    stdin = sys.stdin.read() if not sys.stdin.isatty() else None
    prompt = prompt_of(args.prompt, stdin)
    if not prompt:
        raise ConfigError(
            "nothing to answer: give a prompt", hint=f'localinfer run {args.model} "Why is the sky blue?"'
        )
    options = GenerationOptions(max_tokens=args.max_tokens)
    if args.temperature is not None:
        options = dataclasses.replace(
            options, sampling=dataclasses.replace(options.sampling, temperature=args.temperature)
        )
    explicit = frozenset({"temperature"} if args.temperature is not None else ())
    request = ChatRequest(
        args.model,
        (ChatMessage("user", prompt),),
        options,
        tool_choice=args.tool_choice or "auto",
        explicit=explicit,
    )
    if args.mcp:
        from localinfer.app.commands.run_tools import check_servers

        check_servers(settings, args.mcp)
    import asyncio

    asyncio.run(_run(args, settings, request))
    return 0


async def _run(args: argparse.Namespace, settings: Settings, request: ChatRequest) -> None:
    def answer(client: InferenceClient, request: ChatRequest) -> Awaitable[None]:
        if not args.mcp:
            return _answer(client, request)
        from localinfer.app.commands.run_tools import answer_with_tools

        return answer_with_tools(client, request, settings, args.mcp, yes=args.yes)

    remote = server_client(args, settings)
    try:
        if _server_is_up(remote.where):
            await _answer_remote(remote, request, answer)
            return
    finally:
        await remote.close()
    client, manifest = _in_process(settings, request.model)
    try:  # the model's own parameters fill what the flags leave (LocalClient.chat), as a server's would
        await answer(client, dataclasses.replace(request, model=manifest.name))
    finally:
        await client.close()


async def _answer_remote(
    remote: HttpClient, request: ChatRequest, answer: Callable[[InferenceClient, ChatRequest], Awaitable[None]]
) -> None:
    """The running server's answer. A model it does not have, by a name that can be pulled, is pulled there first
    (its progress shown here), as ``ollama run`` has its server pull, then asked for by the name it was registered
    under."""
    from localinfer.models.pull import can_pull, pulled_name

    if can_pull(request.model):
        name = pulled_name(request.model)
        if not await remote.has_model(name):
            progress = ProgressLine(sys.stderr)
            try:
                async for event in remote.pull(request.model):
                    progress(event)
            finally:
                progress.close()
        request = dataclasses.replace(request, model=name)
    await answer(remote, request)
