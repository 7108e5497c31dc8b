"""Importance matrices in llama.cpp's two file formats, and the values llama_model_quantize takes from them.

An importance matrix holds, for each weight matrix ``W`` of a model, the sum over the calibration text of the
squared activations entering ``W``, per input column, and how many activation rows were summed (one count per
expert for a 3-D weight). ``imatrix_collect.py`` computes one; this module saves and loads it:

- the GGUF format ``llama-imatrix`` writes by default (``save_imatrix``): tensors ``<name>.in_sum2`` (F32,
  ``ne = [columns, matrices]``) and ``<name>.counts`` (F32, ``ne = [1, matrices]``) in name order, and the keys
  ``general.type = imatrix``, ``imatrix.datasets``, ``imatrix.chunk_count`` and ``imatrix.chunk_size``;
- the legacy ``.dat`` format (``--output-format dat``), read exactly as ``common_imatrix_load`` reads it: int32
  entry count, then per entry an int32 name length, the name, int32 ``ncall``, int32 value count and the float32
  values (already the mean times ``ncall``), then optionally an int32 chunk count and a length-prefixed dataset name.

``Matrix.values`` is what ``llama-quantize --imatrix`` hands to the quantizer: GGUF sums divided by their counts
(1 where a count is 0), legacy values divided by ``ncall``.
"""

from __future__ import annotations

import contextlib
import os
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from localinfer.errors import LocalInferError, QuantizeError
from localinfer.models.metadata.gguf_tensors import read_gguf_tensors

F32Array = np.ndarray[Any, np.dtype[np.float32]]
I64Array = np.ndarray[Any, np.dtype[np.int64]]
_SUMS = ".in_sum2"
_COUNTS = ".counts"
_NOT_IMATRIX_HINT = "pass a file written by 'localinfer imatrix' or llama-imatrix (GGUF or legacy .dat)"


@dataclass(frozen=True)
class Entry:
    """One weight's statistics: ``sums`` holds ``len(counts)`` runs of per-column sums, one per matrix."""

    sums: F32Array
    counts: I64Array


@dataclass(frozen=True)
class Matrix:
    entries: dict[str, Entry]
    datasets: tuple[str, ...]
    chunk_count: int
    chunk_size: int  # tokens per chunk; 0 in a legacy file, which does not say
    legacy: bool = False

    def values(self) -> dict[str, F32Array]:
        """Per weight, the importance of each column as llama-quantize's ``load_imatrix`` computes it."""
        return {name: _normalized(entry, self.legacy) for name, entry in self.entries.items()}


def _normalized(entry: Entry, legacy: bool) -> F32Array:
    """In float32, as llama-quantize divides: each matrix's sums by its count, or legacy values by ``ncall``."""
    if legacy:
        ncall = int(entry.counts[0]) if entry.counts.size else 0
        divided: F32Array = entry.sums / np.float32(ncall) if ncall > 0 else entry.sums.copy()
        return divided
    rows = entry.sums.reshape(entry.counts.size, -1)
    counts = entry.counts.astype(np.float32)[:, None]
    safe = np.where(counts > 0, counts, np.float32(1))
    result: F32Array = np.where(counts > 0, rows / safe, np.float32(1)).astype(np.float32).reshape(-1)
    return result


def save_imatrix(matrix: Matrix, path: Path) -> None:
    """Write ``matrix`` to ``path`` in llama.cpp's GGUF imatrix format, through a temporary file renamed into
    place, so an interruption leaves no half-written file. ``matrix.datasets`` must name at least one text (gguf-py
    writes no empty array, and llama-quantize refuses a file without the key). Raises QuantizeError when it cannot
    be written."""
    if not matrix.datasets:
        raise ValueError("an importance matrix to save names the text it was computed on")
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        writer = gguf.GGUFWriter(tmp, arch="")
        writer.kv_data[0].pop(gguf.Keys.General.ARCHITECTURE, None)  # save_imatrix writes no architecture
        writer.add_type(gguf.GGUFType.IMATRIX)
        writer.add_array(gguf.Keys.IMatrix.DATASETS, list(matrix.datasets))
        writer.add_uint32(gguf.Keys.IMatrix.CHUNK_COUNT, matrix.chunk_count)
        writer.add_uint32(gguf.Keys.IMatrix.CHUNK_SIZE, matrix.chunk_size)
        for name in sorted(matrix.entries):
            entry = matrix.entries[name]
            writer.add_tensor(name + _SUMS, _ggml_shaped(entry.sums, entry.counts.size))
            writer.add_tensor(name + _COUNTS, _ggml_shaped(entry.counts, entry.counts.size))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, path)
    except OSError as exc:
        raise QuantizeError(
            f"cannot write {path}: {exc}", hint="pass -o with a path in a folder you can write to"
        ) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _ggml_shaped(values: np.ndarray[Any, Any], n_mat: int) -> F32Array:
    """``values`` as F32 of ggml shape ``[len/n_mat, n_mat]``, written as ggml writes it: without the trailing
    dimension when it is 1 (``ggml_n_dims``)."""
    flat: F32Array = values.astype(np.float32).reshape(-1)
    return flat if n_mat == 1 else flat.reshape(n_mat, -1)


def load_imatrix(path: Path) -> Matrix:
    """The importance matrix in ``path``, GGUF or legacy ``.dat`` (told apart by the GGUF magic, as
    ``common_imatrix_load`` tries GGUF first). Raises QuantizeError for a file that is neither, or a GGUF file that
    is not an importance matrix."""
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise QuantizeError(f"cannot read the importance matrix {path}: {exc}", hint=_NOT_IMATRIX_HINT) from exc
    return _load_gguf(path) if magic == b"GGUF" else _load_legacy(path)


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    found = reader.fields.get(key)
    return found.contents() if found is not None else None


def _load_gguf(path: Path) -> Matrix:
    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise QuantizeError(f"{path} cannot be read as GGUF: {exc}", hint=_NOT_IMATRIX_HINT) from exc
    datasets = _field(reader, gguf.Keys.IMatrix.DATASETS)
    chunk_count = _field(reader, gguf.Keys.IMatrix.CHUNK_COUNT)
    chunk_size = _field(reader, gguf.Keys.IMatrix.CHUNK_SIZE)
    if datasets is None or chunk_count is None or chunk_size is None:
        raise QuantizeError(f"{path} is a GGUF file but not an importance matrix", hint=_NOT_IMATRIX_HINT)
    pairs: dict[str, dict[str, Any]] = {}
    for tensor in reader.tensors:
        for suffix in (_SUMS, _COUNTS):
            if tensor.name.endswith(suffix):
                pairs.setdefault(tensor.name.removesuffix(suffix), {})[suffix] = tensor
    entries: dict[str, Entry] = {}
    for name, pair in sorted(pairs.items()):
        if set(pair) != {_SUMS, _COUNTS}:
            raise QuantizeError(
                f"{path}: {name} has sums without counts or counts without sums", hint=_NOT_IMATRIX_HINT
            )
        if any(t.tensor_type != gguf.GGMLQuantizationType.F32 for t in pair.values()):
            raise QuantizeError(f"{path}: the sums and counts of {name} are not F32", hint=_NOT_IMATRIX_HINT)
        sums = np.array(pair[_SUMS].data, dtype=np.float32).reshape(-1)
        counts = np.rint(np.array(pair[_COUNTS].data, dtype=np.float64).reshape(-1)).astype(np.int64)
        entries[name] = Entry(sums, counts)
    if not entries:
        raise QuantizeError(f"{path} holds no importance matrix entries", hint=_NOT_IMATRIX_HINT)
    return Matrix(entries, tuple(str(d) for d in datasets), int(chunk_count), int(chunk_size))


class _Truncated(Exception):
    """The legacy file ended, or said something impossible, before its data did."""


class _LegacyReader:
    """Reads a legacy file's fields in order, as ``common_imatrix_load_legacy`` does."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def at_end(self) -> bool:
        return self.offset >= len(self.data)

    def int32(self) -> int:
        value: int = struct.unpack_from("<i", self.take(4))[0]
        return value

    def take(self, size: int) -> bytes:
        if size < 0 or self.offset + size > len(self.data):
            raise _Truncated
        self.offset += size
        return self.data[self.offset - size : self.offset]

    def floats(self, count: int) -> F32Array:
        return np.frombuffer(self.take(4 * count), dtype="<f4").astype(np.float32)


def _load_legacy(path: Path) -> Matrix:
    reader = _LegacyReader(path.read_bytes())
    entries: dict[str, Entry] = {}
    try:
        n_entries = reader.int32()
        if n_entries < 1:
            raise _Truncated
        for _ in range(n_entries):
            name = reader.take(reader.int32()).split(b"\0", 1)[0].decode("utf-8")
            ncall = reader.int32()
            nval = reader.int32()
            if nval < 1:
                raise _Truncated
            entries[name] = Entry(reader.floats(nval), np.array([ncall], dtype=np.int64))
    except (_Truncated, UnicodeDecodeError) as exc:
        raise QuantizeError(
            f"{path} is not an importance matrix (GGUF or legacy .dat)", hint=_NOT_IMATRIX_HINT
        ) from exc
    chunk_count, datasets = _legacy_trailer(reader)
    return Matrix(entries, datasets, chunk_count, 0, legacy=True)


def _legacy_trailer(reader: _LegacyReader) -> tuple[int, tuple[str, ...]]:
    """The optional chunk count and dataset name after the entries (absent in the oldest files)."""
    if reader.at_end():
        return 0, ()
    try:
        chunk_count = reader.int32()
    except _Truncated:
        return 0, ()
    try:
        name = reader.take(reader.int32())
    except _Truncated:
        return chunk_count, ()
    return chunk_count, (name.decode("utf-8", errors="replace"),) if name else ()


def check_fits(matrix: Matrix, parts: tuple[Path, ...], label: str) -> None:
    """Raise QuantizeError unless ``matrix`` was computed for a model shaped like the GGUF ``model``: some entry
    names one of its weights, and every entry that does has one value per column and expert (the size
    llama_model_quantize checks, which would otherwise fail midway)."""
    try:
        shapes = {t.name: list(t.shape) for part in parts for t in read_gguf_tensors(part)[0]}
    except LocalInferError as exc:
        raise QuantizeError(exc.message, hint=exc.hint) from exc
    model = parts[0]
    found = [name for name in matrix.entries if name in shapes]
    if not found:
        raise QuantizeError(
            f"the importance matrix {label} is for another model: none of its {len(matrix.entries)} entries names "
            f"a weight of {model.name}",
            hint="compute one for this model with 'localinfer imatrix' or use --calibrate",
        )
    for name in found:
        shape = shapes[name]
        expected = shape[0] * (shape[2] if len(shape) > 2 else 1)
        if matrix.entries[name].sums.size != expected:
            raise QuantizeError(
                f"the importance matrix {label} has {matrix.entries[name].sums.size} values for {name}, which "
                f"needs {expected}: it is for another model",
                hint="compute one for this model with 'localinfer imatrix' or use --calibrate",
            )


def file_record(path: Path, matrix: Matrix, sha256: str) -> dict[str, Any]:
    """What a lineage keeps of an importance matrix passed as a file."""
    return {
        "file": path.name,
        "sha256": sha256,
        "entries": len(matrix.entries),
        "chunks": matrix.chunk_count,
        "datasets": list(matrix.datasets),
    }
