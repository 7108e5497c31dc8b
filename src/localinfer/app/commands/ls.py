"""``localinfer ls``: the registered models and those of other tools found on disk, as a table or as JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from localinfer.config import Settings
    from localinfer.models.store import Manifest

_MB = 1_000_000
MISSING = "(missing)"


def add_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "ls",
        help="list the models here",
        description="List registered models, and GGUF models of other tools found on disk (Hugging Face cache, "
        "Ollama, LM Studio, and the folders in the model_dirs setting), which are served in place.",
    )
    p.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from localinfer.models.library import ModelLibrary

    manifests = ModelLibrary.from_settings(settings).list()
    if args.json:
        print(json.dumps([as_json(m) for m in manifests], indent=2))
    else:
        print(render_table(manifests))
    return 0


def origin(manifest: Manifest) -> str:
    """Where a model comes from, in one word: hf, pypi, file (registered) or ollama, hf-cache, lmstudio, dir."""
    return manifest.source.split(":", 1)[0]


def as_json(manifest: Manifest) -> dict[str, Any]:
    return {
        "name": manifest.name,
        "size": manifest.size,
        "quantization": manifest.quantization,
        "path": str(manifest.path),
        "files": [str(f.path) for f in manifest.files],
        "origin": origin(manifest),
        "source": manifest.source,
        "revision": manifest.revision,
        "sha256": manifest.files[0].sha256,
        "created": manifest.created,
        "present": manifest.files_present(),
        "projector": str(manifest.projector.path) if manifest.projector is not None else None,
        "modalities": list(_modalities(manifest)),
    }


def _modalities(manifest: Manifest) -> tuple[str, ...]:
    from localinfer.models.projector import modalities

    return modalities(manifest.projector.path) if manifest.projector is not None else ()


def render_table(manifests: list[Manifest]) -> str:
    """NAME, SIZE, QUANT, FROM and PATH columns; a model whose file is gone says so in PATH, and one with a
    projector what it sees and hears through it."""
    if not manifests:
        return "no models yet: run 'localinfer pull smollm2' to get one"
    rows = [("NAME", "SIZE", "QUANT", "FROM", "PATH")]
    for m in manifests:
        folder = m.format in ("onnx", "hf")
        shown = m.path.parent if folder else m.path  # an ONNX or Hugging Face model is its folder
        path = str(shown) if m.files_present() else f"{shown} {MISSING}"
        if len(m.files) > 1 and not folder:
            path += f" (+{len(m.files) - 1} parts)"
        if m.projector is not None:
            path += f" (+projector: {', '.join(_modalities(m)) or 'unreadable'})"
        rows.append((m.name, f"{m.size / _MB:.1f} MB", m.quantization or "-", origin(m), path))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)), row[4]]).rstrip()
        for row in rows
    )
