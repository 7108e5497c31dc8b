"""A quantized result into the store: its file (or a ``--keep-split`` result's parts) moved in with one rename,
its lineage recorded beside the store (lineage.py) and its manifest registered. A failure to record or register
leaves no file behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from localinfer.errors import QuantizeError
from localinfer.models.store import Manifest, ModelFile, ModelStore, file_sha256
from localinfer.quantize.lineage import Lineage, write_lineage


@dataclass(frozen=True)
class Installed:
    """What the quantized model is registered as: its ``name``, ``source`` (``quantize:<origin>``) and
    ``quantization`` (the type's name)."""

    name: str
    source: str
    quantization: str


def install_parts(
    store: ModelStore, parts: list[Path], installed: Installed, lineage: Lineage, *, source_parts: int
) -> Manifest:
    """Move the parts of a ``--keep-split`` result, named as llama.cpp finds them from the first one, into a
    folder of their own under the store (the store's blobs are named by content, which llama.cpp cannot follow
    from part to part) with one rename, then register them; removing the model deletes them. Raises QuantizeError
    when there are not as many parts as the source's ``source_parts``, or a folder is in the way."""
    name = installed.name
    if len(parts) != source_parts:
        raise QuantizeError(
            f"llama.cpp's quantizer wrote {len(parts)} parts for a source of {source_parts}",
            hint="quantize without --keep-split",
        )
    folder = store.split_dir / store.folder_name(name)
    if folder.exists():
        raise QuantizeError(f"{folder} is in the way", hint=f"remove it, or choose another --name than '{name}'")
    staged = parts[0].parent
    for extra in staged.iterdir():  # the worker's log, an importance matrix: the folder holds the parts only
        if extra not in parts:
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    folder.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, folder)
    files = tuple(
        ModelFile(
            path=folder / part.name,
            size=(folder / part.name).stat().st_size,
            sha256=file_sha256(folder / part.name),
            owned=True,
        )
        for part in parts
    )
    manifest = Manifest(
        name=name,
        source=installed.source,
        format="gguf",
        files=files,
        quantization=installed.quantization,
        created=int(time.time()),
    )
    try:
        write_lineage(store, str(files[0].sha256), lineage)
        store.register(manifest)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return manifest


def install_file(store: ModelStore, output: Path, installed: Installed, lineage: Lineage) -> Manifest:
    """Move the file into the store's blobs with one rename, then record its lineage and register it."""
    sha256 = file_sha256(output)
    blob = store.blob_path(sha256)
    blob.parent.mkdir(parents=True, exist_ok=True)
    existed = blob.exists()
    os.replace(output, blob)
    manifest = Manifest(
        name=installed.name,
        source=installed.source,
        format="gguf",
        files=(ModelFile(path=blob, size=blob.stat().st_size, sha256=sha256),),
        quantization=installed.quantization,
        created=int(time.time()),
    )
    try:
        write_lineage(store, sha256, lineage)
        store.register(manifest)
    except BaseException:
        if not existed:
            with contextlib.suppress(OSError):
                blob.unlink()
        raise
    return manifest
