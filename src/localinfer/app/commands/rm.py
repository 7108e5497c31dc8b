"""``localinfer rm MODEL...``: unregister models and delete the files only they use."""

from __future__ import annotations

import argparse
from typing import Any

from localinfer.app.commands.ls import origin
from localinfer.config import Settings
from localinfer.errors import LocalInferError, ModelNotFound
from localinfer.models.library import ModelLibrary

_MB = 1_000_000
_OWNERS = {
    "ollama": "Ollama's store (use 'ollama rm')",
    "hf-cache": "the Hugging Face cache (use 'hf cache rm')",
    "lmstudio": "LM Studio's models folder",
    "dir": "a folder named in the model_dirs setting",
}


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
    library = ModelLibrary.from_settings(settings)
    for name in args.models:
        manifest = library.store.get(name)
        if manifest is None:
            found = next((m for m in library.discovered() if m.name == name), None)
            if found is not None:
                raise LocalInferError(
                    f"{name} is not registered with localinfer: it lives in {_OWNERS[origin(found)]}",
                    hint="localinfer only lists it; remove it with the tool that manages it",
                )
            raise ModelNotFound(name, hint="run 'localinfer ls' to see the models here")
        present = [f for f in manifest.files if f.path.exists()]
        library.store.remove(name)
        freed = sum(f.size for f in present if not f.path.exists())
        print(f"removed {name}" + (f" ({freed / _MB:.1f} MB freed)" if freed else " (its files were kept)"))
    return 0
