"""``localinfer rm MODEL...``: unregister models and delete the files only they use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings

_MB = 1_000_000


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "rm",
        help="remove models",
        description="Unregister models. Files localinfer downloaded are deleted when no other model uses them; "
        "files that were on disk before (registered in place, or shared with other tools) are kept.",
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="registered model names")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.models.library import ModelLibrary

    library = ModelLibrary.from_settings(settings)
    for name in args.models:
        freed = library.remove(name)
        print(f"removed {name}" + (f" ({freed / _MB:.1f} MB freed)" if freed else " (its files were kept)"))
    return 0
