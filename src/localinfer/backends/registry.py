"""Which backend serves a model: the one table from a manifest's format to its backend.

GGUF files run on llama.cpp, onnxruntime-genai folders on ONNX Runtime, Hugging Face (safetensors) folders on vLLM
(a child process whose OpenAI API the server relays as it is: ``RELAYED_FORMATS``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from localinfer.backends.base import Backend
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.onnx.backend import OnnxBackend
from localinfer.backends.engine_process.engines import VllmBackend
from localinfer.errors import ModelLoadError
from localinfer.models.store import Manifest

BackendFactory = Callable[[], Backend]
BackendFactories = Mapping[str, BackendFactory]

DEFAULT_BACKENDS: BackendFactories = {"gguf": LlamaCppBackend, "onnx": OnnxBackend, "hf": VllmBackend}
RELAYED_FORMATS = frozenset({"hf"})  # served by an engine process whose OpenAI routes the server relays as they are
PLANNED_FORMATS = frozenset({"gguf", "onnx", "hf"})


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
