"""Which backend serves a model, chosen by the format of its manifest, and what the planner reads of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from localinfer.backends.base import Backend
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.onnx.backend import OnnxBackend
from localinfer.backends.onnx.facts import model_folder
from localinfer.errors import LocalInferError, ModelLoadError
from localinfer.hardware.model_profile import ModelProfile, from_gguf, from_path
from localinfer.models.gguf import cached_gguf_info, read_gguf_info
from localinfer.models.store import Manifest

BackendFactory = Callable[[], Backend]
BackendFactories = Mapping[str, BackendFactory]

DEFAULT_BACKENDS: BackendFactories = {"gguf": LlamaCppBackend, "onnx": OnnxBackend}
_CONVERT_AGAIN = "convert it again with 'localinfer convert', or 'localinfer rm' it"


def backend_for(manifest: Manifest, backends: BackendFactory | BackendFactories) -> Backend:
    """A new backend for ``manifest``: from the format -> factory table, or the one factory given for every format
    (a test's fake). Raises ModelLoadError for a format nothing here serves."""
    if not isinstance(backends, Mapping):
        return backends()
    factory = backends.get(manifest.format)
    if factory is None:
        raise ModelLoadError(
            f"no backend here serves {manifest.format} models like {manifest.name}",
            hint="serve a GGUF or an ONNX (onnxruntime-genai) model",
        )
    return factory()


def model_profile(manifest: Manifest) -> ModelProfile:
    """What the planner needs of ``manifest``. Raises ModelLoadError when its files cannot be read."""
    if manifest.format != "onnx":
        return from_gguf(manifest.name, cached_gguf_info(manifest.path))
    try:
        return from_path(model_folder(manifest.path), manifest.name)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"the ONNX model {manifest.name} cannot be read: {exc}", hint=_CONVERT_AGAIN) from exc


def trained_context(manifest: Manifest) -> int | None:
    """The context the model was trained for, None when unknown or unreadable."""
    if manifest.format not in ("gguf", "onnx"):
        return None
    try:
        return model_profile(manifest).context_train
    except (LocalInferError, OSError):
        return None


def check_files(manifest: Manifest) -> None:
    """Read the model's header (GGUF) or config (ONNX) now, so a corrupt or truncated model fails in one line.
    Raises ModelLoadError."""
    if manifest.format == "onnx":
        model_profile(manifest)
    else:
        read_gguf_info(manifest.path)
