"""Test models derived from a real GGUF with the `gguf` package: a byte-for-byte copy with some keys set, written
once into the test home and registered there (FIM, embedding and reranker test models use it)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gguf

from localinfer.models.store import Manifest, ModelFile, ModelStore

Value = bool | int | str


def copy_with_keys(
    original: Path, target: Path, keys: Mapping[str, Value], edit: Callable[[str, Any], Any] | None = None
) -> None:
    """Write ``original`` to ``target``, every key and tensor as it is, with ``keys`` set (an int as uint32) and
    each other key's value passed through ``edit(name, value)`` when given (its type kept)."""
    reader = gguf.GGUFReader(original)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    writer = gguf.GGUFWriter(target, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF.") or field.name in keys:
            continue  # the writer writes these itself; the others are ours
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = field.contents() if edit is None else edit(field.name, field.contents())
        writer.add_key_value(field.name, value, kind, sub_type=sub_type)
    for key, value in keys.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        else:
            writer.add_string(key, value)
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


def architecture(path: Path) -> str:
    return str(gguf.GGUFReader(path).fields[gguf.Keys.General.ARCHITECTURE].contents())


def derived_once(
    original: Manifest, store: ModelStore, name: str, derivation: str, write: Callable[[Path], object]
) -> Manifest:
    """``name``, ``original`` written by ``write(target)`` into ``store``'s blobs and registered, unless it is there
    already from the same original and ``derivation`` (a name and version of how it is derived)."""
    digest = original.files[0].sha256 or f"{original.path}:{original.size}"
    source = f"derived:{original.source}#sha256={digest}+{derivation}"
    found = store.get(name)
    if found is not None and found.source == source and found.files_present():
        return found
    with store.partial_file() as partial:
        write(partial)
        sha = hashlib.sha256()
        with partial.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                sha.update(block)
        blob = store.blob_path(sha.hexdigest())
        blob.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, blob)
    manifest = Manifest(
        name=name,
        source=source,
        format="gguf",
        files=(ModelFile(path=blob, size=blob.stat().st_size, sha256=sha.hexdigest()),),
        quantization=original.quantization,
        created=int(time.time()),
    )
    store.register(manifest)
    return manifest
