"""The ``localinfer`` command: parse flags, build settings once, run one command, render errors in one place."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from localinfer import __version__
from localinfer.app.commands import ls, pull, serve
from localinfer.config import Settings
from localinfer.errors import LocalInferError

COMMANDS = (serve, pull, ls)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localinfer",
        description="Local LLM inference: an OpenAI-compatible server on llama.cpp, with models that work offline.",
    )
    parser.add_argument("--version", action="version", version=f"localinfer {__version__}")
    parser.add_argument("--home", help="where models and manifests are kept (LOCALINFER_HOME)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    debug = os.environ.get("LOCALINFER_DEBUG") == "1"
    try:
        settings = Settings().with_overrides(home=args.home)
        logging.basicConfig(
            level=logging.DEBUG if debug else getattr(logging, settings.log_level.upper(), logging.INFO),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
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
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
