"""Which backend serves a model: the one table from a manifest's format to its backend.

GGUF files run on llama.cpp, onnxruntime-genai folders on ONNX Runtime, Hugging Face (safetensors) folders on an
engine run as a child process whose OpenAI API the server relays as it is (``RELAYED_FORMATS``): the engine the
``engine`` setting names (vllm, sglang, tgi, trtllm), else TensorRT-LLM for a built TensorRT-LLM engine folder
(known by its files) and vLLM for any other. GGUF models placed on llama.cpp RPC workers run in a child
``localinfer serve`` (``llamacpp/rpc/child.py``), since llama.cpp ends the process that loses a worker:
``backends_for`` is the one place that says so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from localinfer.backends.base import Backend
from localinfer.backends.engine_process.engines import ENGINE_BACKENDS
from localinfer.backends.engine_process.recipes.trtllm import is_trtllm_engine
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.rpc.child import RpcChildBackend
from localinfer.backends.onnx.backend import OnnxBackend
from localinfer.config import Settings
from localinfer.errors import ModelLoadError
from localinfer.models.store import HF_CONFIG, Manifest

BackendFactory = Callable[[], Backend]
BackendFactories = Mapping[str, BackendFactory]


class EngineChoice:
    """The factory of an engine-process backend: ``engine`` (None: chosen per model by ``engine_for``)."""

    def __init__(self, engine: str | None = None) -> None:
        if engine is not None and engine not in ENGINE_BACKENDS:
            raise ModelLoadError(f"there is no engine called {engine}", hint="use " + ", ".join(ENGINE_BACKENDS))
        self.engine = engine

    def __call__(self) -> Backend:
        return ENGINE_BACKENDS[self.engine or "vllm"]()

    def for_manifest(self, manifest: Manifest) -> Backend:
        """A new backend of the engine that serves ``manifest``."""
        return ENGINE_BACKENDS[engine_for(manifest, self.engine)]()


def engine_for(manifest: Manifest, engine: str | None) -> str:
    """The engine that serves ``manifest``: ``engine`` when named, else trtllm for a built TensorRT-LLM engine folder
    and vllm for any other Hugging Face folder."""
    if engine is not None:
        return engine
    folder = manifest.path.parent if manifest.path.name == HF_CONFIG else manifest.path
    return "trtllm" if is_trtllm_engine(folder) else "vllm"


def engine_backends(engine: str | None) -> BackendFactories:
    """The format -> backend table with Hugging Face folders served by ``engine`` (None: chosen per model)."""
    return {**DEFAULT_BACKENDS, "hf": EngineChoice(engine)}


def backends_for(settings: Settings) -> BackendFactories:
    """The format -> backend table ``settings`` ask for: Hugging Face folders on the engine they name, and GGUF
    models in a child ``localinfer serve`` (RpcChildBackend) when they are placed on RPC workers (the ``rpc``
    setting) and not asked for in this process (``rpc_in_process``, which that child itself is started with)."""
    table = engine_backends(settings.engine)
    if not settings.rpc or settings.rpc_in_process:
        return table
    child = functools.partial(
        RpcChildBackend, home=settings.home, log_dir=settings.home / "logs", stall_seconds=settings.rpc_stall_timeout
    )
    return {**table, "gguf": child}


DEFAULT_BACKENDS: BackendFactories = {"gguf": LlamaCppBackend, "onnx": OnnxBackend, "hf": EngineChoice()}
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
    if isinstance(factory, EngineChoice):
        return factory.for_manifest(manifest)
    return factory()
