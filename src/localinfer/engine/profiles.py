"""What the planner reads of a model (its profile), and the check that its files can be read at all. Which
backend serves it is ``backends/registry.py``'s table."""

from __future__ import annotations

from pathlib import Path

from localinfer.backends.registry import PLANNED_FORMATS
from localinfer.errors import LocalInferError, ModelLoadError
from localinfer.hardware.model_profile import ModelProfile, from_gguf, from_path, with_projector
from localinfer.models.metadata import cached_gguf_info, read_gguf_info
from localinfer.models.metadata.onnx import model_folder
from localinfer.models.projector import projector_facts
from localinfer.models.store import Manifest

_CONVERT_AGAIN = "convert it again with 'localinfer convert', or 'localinfer rm' it"


def model_profile(manifest: Manifest) -> ModelProfile:
    """What the planner needs of ``manifest``. Raises ModelLoadError when its files cannot be read."""
    if manifest.format == "gguf":
        return from_gguf(manifest.name, cached_gguf_info(manifest.path))
    hint = _CONVERT_AGAIN if manifest.format == "onnx" else "check the folder's config.json"
    try:
        return from_path(model_folder(manifest.path), manifest.name)
    except (OSError, ValueError, LookupError, TypeError) as exc:
        raise ModelLoadError(f"the {manifest.format} model {manifest.name} cannot be read: {exc}", hint=hint) from exc


def with_its_projector(profile: ModelProfile, projector: Path | None) -> ModelProfile:
    """``profile`` with the projector at ``projector`` counted (its weights and compute buffer); as it is without
    one, or with one that cannot be read (its load says why)."""
    facts = projector_facts(projector)
    if facts is None:
        return profile
    return with_projector(profile, facts.size_bytes, facts.compute_bytes)


def trained_context(manifest: Manifest) -> int | None:
    """The context the model was trained for, None when unknown or unreadable."""
    if manifest.format not in PLANNED_FORMATS:
        return None
    try:
        return model_profile(manifest).context_train
    except (LocalInferError, OSError):
        return None


def check_files(manifest: Manifest) -> None:
    """Read the model's header (GGUF) or config (folders) now, so a corrupt or truncated model fails in one line.
    Raises ModelLoadError."""
    if manifest.format == "gguf":
        read_gguf_info(manifest.path)
    else:
        model_profile(manifest)
