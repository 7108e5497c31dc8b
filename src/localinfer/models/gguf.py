"""Read the few GGUF metadata fields localinfer needs, fast, and tell a broken file from a good one.

The ``gguf`` package's ``GGUFReader`` builds a Python object for every metadata array element (a tokenizer
vocabulary has 50k-260k of them), which takes seconds per model. This module walks the header itself with
``struct`` over a memory map, keeping only scalar and string values and skipping arrays, and uses the
``gguf`` package for the format's constants (value types, quantization block sizes, file types). Tensor
data is never read: the tensor table is walked only to check that the file holds all the bytes it promises.
"""

from __future__ import annotations

import logging
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf

from localinfer.errors import ModelLoadError, ModelNotFound

log = logging.getLogger(__name__)

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

Scalar = int | float | bool | str


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file says about its model.

    ``quantization`` is the file type's name (``Q4_K_M``, ``Q4_1``, ``F16``), None when the file does not
    say; ``context_length`` is the trained context; ``name`` is ``general.name``.
    """

    architecture: str
    quantization: str | None
    context_length: int | None
    block_count: int | None
    has_chat_template: bool
    name: str | None
    size_bytes: int


class _Truncated(Exception):
    """The header runs past the end of the file."""


class _Header:
    """A cursor over a GGUF header in ``buf`` with the file's byte order."""

    def __init__(self, buf: mmap.mmap, endian: str) -> None:
        self.buf = buf
        self.pos = 0
        self.endian = endian
        self._structs = {fmt: struct.Struct(endian + fmt) for fmt in "BbHhIifd?Qq"}

    def unpack(self, fmt: str) -> int | float | bool:
        st = self._structs[fmt]
        if self.pos + st.size > len(self.buf):
            raise _Truncated
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
            raise _Truncated
        text = self.buf[self.pos : end].decode("utf-8", errors="replace")
        self.pos = end
        return text

    def skip_string(self) -> None:
        n = self.u64()
        self.pos += n
        if self.pos > len(self.buf):
            raise _Truncated

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

    def skip_array(self) -> None:
        etype = self.u32()
        count = self.u64()
        if etype == _STRING:
            q = self._structs["Q"]
            buf, pos = self.buf, self.pos
            for _ in range(count):
                if pos + 8 > len(buf):
                    raise _Truncated
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
            raise _Truncated


def read_gguf_info(path: Path) -> GGUFInfo:
    """Read ``path``'s GGUF metadata and check the file is complete, without reading tensor data.

    Raises ModelNotFound when there is no such file, and ModelLoadError when it is not a GGUF file, is
    truncated, or has a header that cannot be parsed.
    """
    path = Path(path)
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
                return _parse(path, buf, size)
    except FileNotFoundError:
        raise ModelNotFound(str(path), hint=f"there is no file at {path}") from None
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}", hint="check the file's permissions") from exc


def _parse(path: Path, buf: mmap.mmap, size: int) -> GGUFInfo:
    try:
        endian = _byte_order(buf)
        header = _Header(buf, endian)
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
            meta[key] = header.value(header.u32())
        needed = _tensor_data_end(header, n_tensors, meta)
    except _Truncated:
        raise _truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise ModelLoadError(
            f"{path} has a GGUF header that cannot be read: {exc}",
            hint="the file is damaged; download or convert it again",
        ) from exc
    if needed > size:
        raise _truncated(path, size, needed)
    return _info(path, meta, size)


def _byte_order(buf: mmap.mmap) -> str:
    """'<' or '>': a version that reads as a huge number in little-endian means a big-endian file."""
    if len(buf) < 8:
        raise _Truncated
    (little,) = struct.unpack_from("<I", buf, 4)
    return "<" if little & 0xFFFF else ">"


def _tensor_data_end(header: _Header, n_tensors: int, meta: dict[str, Scalar | None]) -> int:
    """Walk the tensor table; return the byte offset where the last tensor's data ends."""
    alignment = meta.get("general.alignment")
    align = alignment if isinstance(alignment, int) and alignment > 0 else gguf.GGUF_DEFAULT_ALIGNMENT
    end_rel = 0
    for _ in range(n_tensors):
        name = header.string()
        n_dims = header.u32()
        if n_dims > 16:
            raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
        dims = [header.u64() for _ in range(n_dims)]
        ttype = header.u32()
        offset = header.u64()
        nbytes = _tensor_bytes(ttype, dims)
        end_rel = max(end_rel, offset + nbytes)
    data_start = -(-header.pos // align) * align
    return data_start + end_rel


def _tensor_bytes(ttype: int, dims: list[int]) -> int:
    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
    except (ValueError, KeyError):
        log.debug("unknown tensor type %d: its size is not checked", ttype)
        return 0
    return int(math.prod(dims)) // int(block) * int(type_size)


def _truncated(path: Path, size: int, needed: int | None) -> ModelLoadError:
    detail = f": it has {size} bytes but its tensors need {needed}" if needed else ""
    return ModelLoadError(
        f"{path} is a truncated GGUF file{detail}",
        hint="the file is incomplete (an interrupted download?); get it again",
    )


def _info(path: Path, meta: dict[str, Scalar | None], size: int) -> GGUFInfo:
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelLoadError(
            f"{path} does not say its architecture (general.architecture)",
            hint="the file was not written by a GGUF converter localinfer knows; convert the model again",
        )
    name = meta.get("general.name")
    return GGUFInfo(
        architecture=arch,
        quantization=_quantization(meta.get("general.file_type")),
        context_length=_int_or_none(meta.get(f"{arch}.context_length")),
        block_count=_int_or_none(meta.get(f"{arch}.block_count")),
        has_chat_template=isinstance(meta.get("tokenizer.chat_template"), str),
        name=name if isinstance(name, str) and name else None,
        size_bytes=size,
    )


def _quantization(file_type: Scalar | None) -> str | None:
    """``general.file_type`` as a name: ``MOSTLY_Q4_K_M`` -> ``Q4_K_M``, ``ALL_F32`` -> ``F32``."""
    if not isinstance(file_type, int) or isinstance(file_type, bool):
        return None
    try:
        member = gguf.LlamaFileType(file_type)
    except ValueError:
        return None
    if member is gguf.LlamaFileType.GUESSED:
        return None
    return member.name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _int_or_none(value: Scalar | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
