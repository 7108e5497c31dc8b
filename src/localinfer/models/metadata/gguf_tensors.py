"""A GGUF's tensor table, walked without reading tensor data: each tensor's name, shape and type
(``read_gguf_tensors``), and for the metadata reader (gguf.py) how many parameters the tensors hold and where their
data ends, to tell a complete file from a cut one.
"""

from __future__ import annotations

import logging
import math
import mmap
import struct
from pathlib import Path
from typing import NamedTuple

import gguf

from localinfer.models.metadata.gguf_file import (
    Header,
    Scalar,
    Truncated,
    alignment,
    read_gguf_file,
    read_metadata,
    truncated,
    unreadable,
)

log = logging.getLogger(__name__)


class TensorTable(NamedTuple):
    """What the metadata reader needs of a tensor table."""

    data_end: int  # the byte offset where the last tensor's data ends
    parameters: int  # elements in all tensors together
    n_tensors: int


class TensorEntry(NamedTuple):
    """One tensor of a GGUF's table: its name, shape (GGUF's order: the row length first) and ggml type id."""

    name: str
    shape: tuple[int, ...]
    type: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


def read_gguf_tensors(path: Path) -> tuple[tuple[TensorEntry, ...], int]:
    """A GGUF's tensor table and the byte offset where tensor data starts. Metadata arrays (the vocabulary) are
    skipped, weights never read: a header the ``gguf`` package's reader takes seconds over is read in
    milliseconds. Raises ModelLoadError for a file that is not a readable GGUF."""
    return read_gguf_file(path, _parse_tensors)


def _parse_tensors(path: Path, buf: mmap.mmap, size: int) -> tuple[tuple[TensorEntry, ...], int]:
    try:
        header, n_tensors, meta = read_metadata(path, buf)
        entries = []
        for _ in range(n_tensors):
            name = header.string()
            n_dims = header.u32()
            if n_dims > 16:
                raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
            shape = tuple(header.u64() for _ in range(n_dims))
            entries.append(TensorEntry(name, shape, header.u32()))
            header.u64()  # the data offset
    except Truncated:
        raise truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise unreadable(path, exc) from exc
    return tuple(entries), -(-header.pos // alignment(meta)) * alignment(meta)


def walk_tensor_table(header: Header, n_tensors: int, meta: dict[str, Scalar | None]) -> TensorTable:
    """Walk the tensor table: where the last tensor's data ends, and how many elements the tensors hold."""
    align = alignment(meta)
    end_rel = 0
    parameters = 0
    for _ in range(n_tensors):
        name = header.string()
        n_dims = header.u32()
        if n_dims > 16:
            raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
        elements = math.prod(header.u64() for _ in range(n_dims))
        ttype = header.u32()
        offset = header.u64()
        end_rel = max(end_rel, offset + _tensor_bytes(ttype, elements))
        parameters += elements
    data_start = -(-header.pos // align) * align
    return TensorTable(data_end=data_start + end_rel, parameters=parameters, n_tensors=n_tensors)


def _tensor_bytes(ttype: int, elements: int) -> int:
    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
    except (ValueError, KeyError):
        log.debug("unknown tensor type %d: its size is not checked", ttype)
        return 0
    return elements // int(block) * int(type_size)
