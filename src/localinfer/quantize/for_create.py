"""The quantizer ``create --quantize`` (and ``/api/create``'s ``quantize``) use: llama.cpp's, as ``quantize``."""

from __future__ import annotations

from localinfer.models.create import Quantizer
from localinfer.models.store import Manifest, ModelSource, ModelStore
from localinfer.progress import ProgressSink
from localinfer.quantize.gguf import Options, quantize_model
from localinfer.quantize.types import parse_type


def quantizer(store: ModelStore, models: ModelSource) -> Quantizer:
    """Quantize a base model's file to a type (as ``ollama create -q``: an F16, BF16 or F32 model) and register the
    result under the name given. Raises QuantizeError."""

    def run(base: Manifest, type_name: str, name: str, progress: ProgressSink) -> Manifest:
        options = Options(type=parse_type(type_name))
        return quantize_model(store, models, str(base.path), options, name=name, progress=progress).manifest

    return run
