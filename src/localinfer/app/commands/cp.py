"""``localinfer cp SOURCE DESTINATION``: the same model under a second name, files shared, as ``ollama cp``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "cp",
        help="copy a model to a new name",
        description="Register a model again under a new name, with its defaults and adapters; the files are shared, "
        "not copied, and stay while either name uses them.",
    )
    p.add_argument("source", help="a model name (registered, or another tool's from 'localinfer ls')")
    p.add_argument("destination", help="the new name")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.models.create import copy
    from localinfer.models.library import ModelLibrary

    copy(ModelLibrary.from_settings(settings), args.source, args.destination)
    print(f"copied '{args.source}' to '{args.destination}'")
    return 0
