"""Which backend serves a model, chosen by the format of its manifest, and what the planner reads of it.

GGUF files run on llama.cpp, onnxruntime-genai folders on ONNX Runtime, Hugging Face (safetensors) folders on vLLM
(a child process whose OpenAI API the server relays as it is: ``RELAYED_FORMATS``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from localinfer.backends.base import Backend
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.onnx.backend import OnnxBackend
from localinfer.backends.onnx.facts import model_folder
from localinfer.backends.vllm.backend import VllmBackend
from localinfer.errors import LocalInferError, ModelLoadError
from localinfer.hardware.model_profile import ModelProfile, from_gguf, from_path
from localinfer.models.gguf import cached_gguf_info, read_gguf_info
from localinfer.models.store import Manifest

BackendFactory = Callable[[], Backend]
BackendFactories = Mapping[str, BackendFactory]

DEFAULT_BACKENDS: BackendFactories = {"gguf": LlamaCppBackend, "onnx": OnnxBackend, "hf": VllmBackend}
RELAYED_FORMATS = frozenset({"hf"})  # served by an engine process whose OpenAI routes the server relays as they are
PLANNED_FORMATS = frozenset({"gguf", "onnx", "hf"})
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
            hint="serve a GGUF file, an ONNX (onnxruntime-genai) folder or a Hugging Face (safetensors) folder",
        )
    return factory()


def model_profile(manifest: Manifest) -> ModelProfile:
    """What the planner needs of ``manifest``. Raises ModelLoadError when its files cannot be read."""
    if manifest.format == "gguf":
        return from_gguf(manifest.name, cached_gguf_info(manifest.path))
    hint = _CONVERT_AGAIN if manifest.format == "onnx" else "check the folder's config.json"
    try:
        return from_path(model_folder(manifest.path), manifest.name)
    except (OSError, ValueError, LookupError, TypeError) as exc:
        raise ModelLoadError(f"the {manifest.format} model {manifest.name} cannot be read: {exc}", hint=hint) from exc


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
