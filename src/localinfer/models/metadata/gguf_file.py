"""The GGUF file format, walked with ``struct`` over a memory map: the file opened and checked, a cursor over its
header, the metadata up to the tensor table, and the errors a damaged file gives.

The ``gguf`` package's ``GGUFReader`` builds a Python object for every metadata array element (a tokenizer
vocabulary has 50k-260k of them), which takes seconds per model. This walk keeps only scalar and string values and
skips arrays, and uses the ``gguf`` package for the format's constants (value types). What a file says about its
model is read by gguf.py, its tensor table by gguf_tensors.py.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import gguf

from localinfer.errors import ModelLoadError, ModelNotFound

_MAGIC = b"GGUF"
_MAX_COUNT = 10_000_000  # more tensors or metadata keys than this means the header is garbage
_SCALAR_FORMATS: dict[int, str] = {
    gguf.GGUFValueType.UINT8: "B",
    gguf.GGUFValueType.INT8: "b",
    gguf.GGUFValueType.UINT16: "H",
    gguf.GGUFValueType.INT16: "h",
    gguf.GGUFValueType.UINT32: "I",
    gguf.GGUFValueType.INT32: "i",
    gguf.GGUFValueType.FLOAT32: "f",
    gguf.GGUFValueType.BOOL: "?",
    gguf.GGUFValueType.UINT64: "Q",
    gguf.GGUFValueType.INT64: "q",
    gguf.GGUFValueType.FLOAT64: "d",
}
_STRING = int(gguf.GGUFValueType.STRING)
_ARRAY = int(gguf.GGUFValueType.ARRAY)

_TOKENS = "tokenizer.ggml.tokens"

Scalar = int | float | bool | str
_T = TypeVar("_T")


class Truncated(Exception):
    """The header runs past the end of the file."""


class Header:
    """A cursor over a GGUF header in ``buf`` with the file's byte order."""

    def __init__(self, buf: mmap.mmap, endian: str) -> None:
        self.buf = buf
        self.pos = 0
        self.endian = endian
        self._structs = {fmt: struct.Struct(endian + fmt) for fmt in "BbHhIifd?Qq"}
        self.tokens_found: frozenset[bytes] = frozenset()  # of the texts looked for, those in the vocabulary

    def unpack(self, fmt: str) -> int | float | bool:
        st = self._structs[fmt]
        if self.pos + st.size > len(self.buf):
            raise Truncated
        (value,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return value  # type: ignore[no-any-return]

    def u32(self) -> int:
        return int(self.unpack("I"))

    def u64(self) -> int:
        return int(self.unpack("Q"))

    def string(self) -> str:
        n = self.u64()
        end = self.pos + n
        if end > len(self.buf):
            raise Truncated
        text = self.buf[self.pos : end].decode("utf-8", errors="replace")
        self.pos = end
        return text

    def skip_string(self) -> None:
        n = self.u64()
        self.pos += n
        if self.pos > len(self.buf):
            raise Truncated

    def value(self, vtype: int) -> Scalar | None:
        """Read one value; arrays are skipped and read as None."""
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            self.skip_array()
            return None
        fmt = _SCALAR_FORMATS.get(vtype)
        if fmt is None:
            raise ValueError(f"unknown metadata value type {vtype}")
        return self.unpack(fmt)

    def strings_among(self, wanted: frozenset[bytes]) -> frozenset[bytes]:
        """Read an array, keeping those of its strings that are in ``wanted`` (none for an array of others)."""
        start = self.pos
        if self.u32() != _STRING:
            self.pos = start
            self.skip_array()
            return frozenset()
        count = self.u64()
        lengths = {len(text) for text in wanted}
        found = set()
        q = self._structs["Q"]
        buf, pos = self.buf, self.pos
        for _ in range(count):
            if pos + 8 > len(buf):
                raise Truncated
            n = q.unpack_from(buf, pos)[0]
            pos += 8
            if n in lengths and buf[pos : pos + n] in wanted:
                found.add(buf[pos : pos + n])
            pos += n
        if pos > len(buf):
            raise Truncated
        self.pos = pos
        return frozenset(found)

    def skip_array(self) -> None:
        etype = self.u32()
        count = self.u64()
        if etype == _STRING:
            q = self._structs["Q"]
            buf, pos = self.buf, self.pos
            for _ in range(count):
                if pos + 8 > len(buf):
                    raise Truncated
                pos += 8 + q.unpack_from(buf, pos)[0]
            self.pos = pos
        elif etype == _ARRAY:
            for _ in range(count):
                self.skip_array()
        else:
            fmt = _SCALAR_FORMATS.get(etype)
            if fmt is None:
                raise ValueError(f"unknown metadata array type {etype}")
            self.pos += self._structs[fmt].size * count
        if self.pos > len(self.buf):
            raise Truncated


def read_gguf_file(path: Path, parse: Callable[[Path, mmap.mmap, int], _T]) -> _T:
    """Open ``path``, check it is a GGUF file and hand its memory map to ``parse``; errors as read_gguf_info's."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ModelLoadError(f"{path} is not a file", hint="pass the path of a .gguf model file")
        with path.open("rb") as fh:
            head = fh.read(4)
            if head != _MAGIC:
                raise ModelLoadError(
                    f"{path} is not a GGUF file (it starts with {head!r}, not {_MAGIC!r})",
                    hint="localinfer loads GGUF models: pass a .gguf file, or 'localinfer pull' a model",
                )
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return parse(path, buf, size)
    except FileNotFoundError:
        raise ModelNotFound(str(path), hint=f"there is no file at {path}") from None
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}", hint="check the file's permissions") from exc


def read_metadata(
    path: Path, buf: mmap.mmap, tokens_among: frozenset[bytes] = frozenset()
) -> tuple[Header, int, dict[str, Scalar | None]]:
    """Read the header up to the tensor table: the cursor (left at the table), the tensor count, the metadata.

    Arrays are skipped and read as None; the cursor's ``tokens_found`` holds those of ``tokens_among`` that are
    tokens of the vocabulary. Raises Truncated, ValueError or struct.error for a damaged
    header, and ModelLoadError for a format version too old to load.
    """
    header = Header(buf, byte_order(buf))
    header.pos = 4
    version = header.u32()
    if version < 2:
        raise ModelLoadError(
            f"{path} is a GGUF version {version} file, which is too old to load",
            hint="convert the model again with a current llama.cpp",
        )
    n_tensors, n_kv = header.u64(), header.u64()
    if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
        raise ValueError(f"implausible counts: {n_tensors} tensors, {n_kv} metadata keys")
    meta: dict[str, Scalar | None] = {}
    for _ in range(n_kv):
        key = header.string()
        vtype = header.u32()
        if key == _TOKENS and tokens_among and vtype == _ARRAY:
            header.tokens_found = header.strings_among(tokens_among)
            meta[key] = None
        else:
            meta[key] = header.value(vtype)
    return header, n_tensors, meta


def alignment(meta: dict[str, Scalar | None]) -> int:
    alignment = meta.get("general.alignment")
    return alignment if isinstance(alignment, int) and alignment > 0 else gguf.GGUF_DEFAULT_ALIGNMENT


def byte_order(buf: mmap.mmap) -> str:
    """'<' or '>': a version that reads as a huge number in little-endian means a big-endian file."""
    if len(buf) < 8:
        raise Truncated
    (little,) = struct.unpack_from("<I", buf, 4)
    return "<" if little & 0xFFFF else ">"


def unreadable(path: Path, exc: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"{path} has a GGUF header that cannot be read: {exc}",
        hint="the file is damaged; download or convert it again",
    )


def truncated(path: Path, size: int, needed: int | None) -> ModelLoadError:
    detail = f": it has {size} bytes but its tensors need {needed}" if needed else ""
    return ModelLoadError(
        f"{path} is a truncated GGUF file{detail}",
        hint="the file is incomplete (an interrupted download?); get it again",
    )
