"""SmolLM2 stated as an embedding model: the embedding test model, derived once into the test home.

Neither test model is an embedding model (their GGUFs state no ``<arch>.pooling_type``), so nothing would show
that the pooling a GGUF states is the one used, or that /api/show calls such a model ``embedding``. This copies
SmolLM2's GGUF (every key and tensor, byte for byte) and adds ``llama.pooling_type = 3`` (last-token pooling, as
Qwen3-Embedding's GGUFs state it). The weights are SmolLM2's own: its vectors are the last token's hidden state,
where SmolLM2 itself is pooled by the mean of all of them, so for a causal model the mean of one text equals the
mean of the copy's vectors of each of its prefixes. The copy is registered as ``smollm2-embed``; its source names
the original's sha256 and this derivation's version, so a changed original derives it again.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import gguf

from localinfer.models.store import Manifest, ModelFile, ModelStore

NAME = "smollm2-embed"
VERSION = 1
POOLING_LAST = 3  # llama.cpp's LLAMA_POOLING_TYPE_LAST


def _source(original: Manifest) -> str:
    digest = original.files[0].sha256 or f"{original.path}:{original.size}"
    return f"derived:{original.source}#sha256={digest}+pooling-last-v{VERSION}"


def write_pooling_copy(original: Path, target: Path, pooling: int = POOLING_LAST) -> None:
    """Write ``original`` to ``target`` with ``<arch>.pooling_type`` set to ``pooling``."""
    reader = gguf.GGUFReader(original)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    key = f"{arch}.pooling_type"
    writer = gguf.GGUFWriter(target, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name in (gguf.Keys.General.ARCHITECTURE, key) or field.name.startswith("GGUF."):
            continue  # the writer writes these itself; the pooling is ours
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)
    writer.add_uint32(key, pooling)
    for tensor in reader.tensors:
        writer.add_tensor_info(
            tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


def embedding_model_once(original: Manifest, store: ModelStore) -> Manifest:
    """The last-pooling copy of ``original`` registered in ``store`` as ``smollm2-embed``, derived when it is
    missing or was derived from another file or version."""
    source = _source(original)
    found = store.get(NAME)
    if found is not None and found.source == source and found.files_present():
        return found
    with store.partial_file() as partial:
        write_pooling_copy(original.path, partial)
        sha = hashlib.sha256()
        with partial.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                sha.update(block)
        blob = store.blob_path(sha.hexdigest())
        blob.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, blob)
    manifest = Manifest(
        name=NAME,
        source=source,
        format="gguf",
        files=(ModelFile(path=blob, size=blob.stat().st_size, sha256=sha.hexdigest()),),
        quantization=original.quantization,
        created=int(time.time()),
    )
    store.register(manifest)
    return manifest
