"""What ``create`` (and ``/api/create``) are given to do the work of other rooms: the quantizer ``--quantize`` uses
(llama.cpp's, as ``quantize``), and the converter of a Modelfile's PEFT ``ADAPTER`` folder (``convert --to
gguf-lora``'s)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from localinfer.models.create import AdapterConverter, Quantizer
from localinfer.models.store import Manifest, ModelFile, ModelSource, ModelStore, file_sha256
from localinfer.progress import ProgressSink
from localinfer.quantize.gguf_quantizer import Options, quantize_model
from localinfer.quantize.peft_lora import convert_peft_lora
from localinfer.quantize.quant_types import parse_type


def quantizer(store: ModelStore, models: ModelSource) -> Quantizer:
    """Quantize a base model's file to a type (as ``ollama create -q``: an F16, BF16 or F32 model) and register the
    result under the name given. Raises QuantizeError."""

    def run(base: Manifest, type_name: str, name: str, progress: ProgressSink) -> Manifest:
        options = Options(type=parse_type(type_name))
        return quantize_model(store, models, str(base.path), options, name=name, progress=progress).manifest

    return run


def adapter_converter(store: ModelStore) -> AdapterConverter:
    """Convert a PEFT adapter folder into a GGUF LoRA for a base model, kept in ``store``'s blobs under its sha256
    (written whole, then moved in: a failed conversion leaves nothing). Raises ConvertError naming what is wrong."""

    def run(folder: Path, base: Manifest, progress: ProgressSink) -> ModelFile:
        store.tmp_dir.mkdir(parents=True, exist_ok=True)
        partial = store.tmp_dir / f"adapter-{uuid.uuid4().hex[:12]}.gguf"
        try:
            convert_peft_lora(folder, base.path, partial)
            digest = file_sha256(partial)
            blob = store.blob_path(digest)
            blob.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, blob)
        finally:
            partial.unlink(missing_ok=True)
        return ModelFile(path=blob, size=blob.stat().st_size, sha256=digest)

    return run
