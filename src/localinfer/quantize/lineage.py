"""What a quantized model was made from, and what it lost: a side file kept with the store, one per model file.

``<store>/quantized/sha256-<hex>.json`` belongs to the file with that sha256 (the store's blob), so the record
follows the content whatever name it is registered under; ``show`` reads it. ``quality`` holds the figures of
``quantize --check`` (perplexity and KL divergence against the source), when it ran; ``imatrix`` what the
importance matrix was, when one was used (a file's name and sha256, or the text it was calibrated on).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from localinfer.models.store import Manifest, ModelStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lineage:
    source_name: str
    source: str  # the source model's origin (``pypi:...``, ``file:/x.gguf``)
    source_sha256: str | None
    source_type: str | None  # the source's quantization, as its file states it
    type: str  # the type it was quantized to
    requantized: bool  # the source was already quantized
    options: dict[str, Any] = field(default_factory=dict)
    quality: dict[str, Any] | None = None
    imatrix: dict[str, Any] | None = None  # imatrix.file_record or imatrix_collect.calibrate's record

    def summary(self) -> str:
        source_type = f" ({self.source_type})" if self.source_type else ""
        again = ", requantized" if self.requantized else ""
        imatrix = " with an importance matrix" if self.imatrix else ""
        return f"quantized from {self.source_name}{source_type} to {self.type}{again}{imatrix}"


def describe_imatrix(record: dict[str, Any]) -> str:
    """One line for a lineage's imatrix record: the file (name, sha256, entries, chunks) or the calibration."""
    if "calibrated_on" in record:
        return f"calibrated on {record['calibrated_on']}, {record['chunks']} chunks of {record['chunk_size']} tokens"
    chunks = f", {record['chunks']} chunks" if record.get("chunks") else ""
    return f"{record['file']} (sha256 {str(record['sha256'])[:12]}, {record['entries']} entries{chunks})"


def _path(store: ModelStore, sha256: str) -> Path:
    return store.record_path(sha256)  # removed with the file it describes


def write_lineage(store: ModelStore, sha256: str, lineage: Lineage) -> None:
    """Keep ``lineage`` for the file with this sha256, replacing any earlier record, atomically."""
    target = _path(store, sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(json.dumps(asdict(lineage), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def read_lineage(store: ModelStore, manifest: Manifest) -> Lineage | None:
    """The record of a model quantized by localinfer, or None (another model, or an unreadable record)."""
    sha256 = manifest.files[0].sha256
    if sha256 is None or not manifest.source.startswith("quantize:"):
        return None
    try:
        data = json.loads(_path(store, sha256).read_text(encoding="utf-8"))
        return Lineage(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("ignoring unreadable quantize record of %s: %s", manifest.name, exc)
        return None


def add_quality(store: ModelStore, manifest: Manifest, quality: dict[str, Any]) -> None:
    """Keep ``quality`` with the model's record (nothing when it has none)."""
    lineage = read_lineage(store, manifest)
    sha256 = manifest.files[0].sha256
    if lineage is not None and sha256 is not None:
        write_lineage(store, sha256, replace(lineage, quality=quality))
