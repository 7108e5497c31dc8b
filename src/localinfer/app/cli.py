"""The ``localinfer`` command: parse flags, build settings once, run one command, render errors in one place.

Building the parser imports no heavy library (llama.cpp, ONNX Runtime, Textual, FastAPI, numpy, pydantic): each
command imports what it uses when it runs, so ``--version`` and ``--help`` answer at once
(tests/app/test_startup_imports.py)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from localinfer import __version__
from localinfer.app.commands import (
    convert,
    cp,
    create,
    hw,
    imatrix,
    ls,
    mcp,
    perplexity,
    ps,
    pull,
    quantize,
    rm,
    rpc,
    run,
    serve,
    show,
    stop,
    tui,
)
from localinfer.errors import LocalInferError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

COMMANDS = (serve, run, pull, create, cp, ls, show, rm, ps, stop, hw, rpc, convert, quantize, imatrix, perplexity, mcp)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localinfer",
        description="Local LLM inference: an OpenAI-compatible server on llama.cpp, with models that work offline. "
        "With no COMMAND, opens the app: chat and model manager in the terminal.",
    )
    parser.add_argument("--version", action="version", version=f"localinfer {__version__}")
    parser.add_argument("--home", help="where models and manifests are kept (LOCALINFER_HOME)")
    tui.add_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


_CHATTY_LIBRARIES = ("httpx", "httpx2", "huggingface_hub", "filelock")


def configure_logging(level_name: str, *, debug: bool, long_running: bool, log_file: Path | None = None) -> None:
    """Log at ``level_name`` for the server; one-shot commands show warnings and up, so output stays theirs.
    The app logs to ``log_file``, since the terminal is its screen.

    HTTP clients log every request at INFO: they are kept to warnings unless debugging.
    """
    level = getattr(logging, level_name.upper(), logging.INFO)
    if debug:
        level = logging.DEBUG
    elif not long_running:
        level = max(level, logging.WARNING)
    log_format = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        logging.basicConfig(level=level, format=log_format, filename=log_file)
    else:
        logging.basicConfig(level=level, format=log_format)
    if not debug:
        for name in _CHATTY_LIBRARIES:
            logging.getLogger(name).setLevel(max(level, logging.WARNING))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args.run = tui.run
    debug = os.environ.get("LOCALINFER_DEBUG") == "1"
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from localinfer.config import Settings

    try:
        settings = Settings().with_overrides(home=args.home)
        in_app = args.command is None
        configure_logging(
            settings.log_level,
            debug=debug,
            long_running=args.command in ("serve", "rpc", None),
            log_file=settings.home / "localinfer.log" if in_app else None,
        )
        result: int = args.run(args, settings)
        return result
    except LocalInferError as exc:
        if debug:
            raise
        print(f"localinfer: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        if debug:
            raise
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        print(f"localinfer: invalid setting {where}: {first['msg']}", file=sys.stderr)
        print("hint: check LOCALINFER_* environment variables and the config file", file=sys.stderr)
        return 2
    except SettingsError as exc:  # a value the environment gives as JSON that is not JSON
        if debug:
            raise
        print(f"localinfer: invalid setting: {exc}", file=sys.stderr)
        print("hint: a list or table in a LOCALINFER_* variable is written as JSON", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
