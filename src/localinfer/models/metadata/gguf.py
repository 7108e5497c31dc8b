"""Read the few GGUF metadata fields localinfer needs, fast, and tell a broken file from a good one.

The ``gguf`` package's ``GGUFReader`` builds a Python object for every metadata array element (a tokenizer
vocabulary has 50k-260k of them), which takes seconds per model. This module walks the header itself with
``struct`` over a memory map, keeping only scalar and string values and skipping arrays, and uses the
``gguf`` package for the format's constants (value types, quantization block sizes, file types). Tensor
data is never read: the tensor table is walked only to count parameters and to check that the file holds all
the bytes it promises.
"""

from __future__ import annotations

import functools
import logging
import math
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import gguf

from localinfer.errors import ModelLoadError, ModelNotFound
from localinfer.models.metadata.thinking import MARKER_TOKENS, thinking_markers
from localinfer.types import ThinkingMarkers

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

# Fill-in-the-middle: a file declares it with all three token ids, under today's keys or the older ones.
_FIM_KEY_SETS = (
    ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id"),
    ("tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id", "tokenizer.ggml.middle_token_id"),
)
_CHAT_TEMPLATE = "tokenizer.chat_template"
_TOKENS = "tokenizer.ggml.tokens"

Scalar = int | float | bool | str
_T = TypeVar("_T")


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file says about its model.

    ``quantization`` is the file type's name (``Q4_K_M``, ``Q4_1``, ``F16``), None when the file does not
    say; ``context_length`` is the trained context; ``name`` is ``general.name``. Any other field is None
    when the file does not state it:

    - ``parameters``: the sum of every tensor's element count; None for a file without tensors and for one
      shard of a split model (``split_count`` > 1), which holds only part of them;
    - ``fim``: the file declares fill-in-the-middle prefix, suffix and middle token ids;
    - ``license``, ``basename``, ``size_label``: ``general.license``, ``general.basename``,
      ``general.size_label`` as written (``apache-2.0``, ``smollm2``, ``135M``);
    - ``embedding_length``, ``head_count``, ``head_count_kv``: ``<arch>.embedding_length`` and
      ``<arch>.attention.head_count[_kv]``; the head counts are None where the file gives one per layer;
    - ``split_count``: ``split.count``, how many files the model is split into;
    - ``key_length``, ``value_length``, ``sliding_window``: ``<arch>.attention.key_length``, ``.value_length`` and
      ``.sliding_window`` (a head's key and value sizes when they are not embedding / heads; the window of
      sliding-window attention).
    """

    architecture: str
    quantization: str | None
    context_length: int | None
    block_count: int | None
    has_chat_template: bool
    name: str | None
    size_bytes: int
    parameters: int | None = None
    fim: bool = False
    license: str | None = None
    embedding_length: int | None = None
    head_count: int | None = None
    head_count_kv: int | None = None
    split_count: int | None = None
    key_length: int | None = None
    value_length: int | None = None
    sliding_window: int | None = None
    basename: str | None = None
    size_label: str | None = None


class _TensorTable(NamedTuple):
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


class _Truncated(Exception):
    """The header runs past the end of the file."""


class _Header:
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
                raise _Truncated
            n = q.unpack_from(buf, pos)[0]
            pos += 8
            if n in lengths and buf[pos : pos + n] in wanted:
                found.add(buf[pos : pos + n])
            pos += n
        if pos > len(buf):
            raise _Truncated
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
    return _read(Path(path), _parse)


def cached_gguf_info(path: Path) -> GGUFInfo:
    """``read_gguf_info``, remembered per path, size and mtime: listings (``ls``, ``/v1/models``, the TUI) read
    the same headers again on every call. Raises what ``read_gguf_info`` raises."""
    path = Path(path)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return read_gguf_info(path)  # raises ModelNotFound
    return _cached_info(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _cached_info(path: Path, size: int, mtime_ns: int) -> GGUFInfo:
    return read_gguf_info(path)


def read_chat_template(path: Path) -> str | None:
    """The chat template (``tokenizer.chat_template``) of the GGUF file at ``path``, or None when it has none.

    Reads only the metadata, as fast as ``read_gguf_info``; the tensor table is not walked, so a file cut
    inside its tensor data is not noticed here. Raises ModelNotFound when there is no such file, and
    ModelLoadError when it is not a GGUF file or its metadata is truncated or cannot be parsed.
    """
    return _read(Path(path), _parse_chat_template)


def read_gguf_thinking(path: Path) -> ThinkingMarkers | None:
    """How the model of the GGUF file at ``path`` marks its thinking, from its chat template and its vocabulary (a
    text is one token when the token list holds it), as metadata/thinking.py decides; None for a model that does
    not reason. The model is not loaded. Raises what ``read_chat_template`` raises."""
    return _read(Path(path), _parse_thinking)


def _parse_thinking(path: Path, buf: mmap.mmap, size: int) -> ThinkingMarkers | None:
    wanted = frozenset(text.encode() for text in MARKER_TOKENS)
    try:
        header, _, meta = _read_metadata(path, buf, tokens_among=wanted)
    except _Truncated:
        raise _truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise _unreadable(path, exc) from exc
    template = meta.get(_CHAT_TEMPLATE)
    return thinking_markers(
        template if isinstance(template, str) else None, lambda t: t.encode() in header.tokens_found
    )


def _read(path: Path, parse: Callable[[Path, mmap.mmap, int], _T]) -> _T:
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


def _parse(path: Path, buf: mmap.mmap, size: int) -> GGUFInfo:
    try:
        header, n_tensors, meta = _read_metadata(path, buf)
        tensors = _walk_tensor_table(header, n_tensors, meta)
    except _Truncated:
        raise _truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise _unreadable(path, exc) from exc
    if tensors.data_end > size:
        raise _truncated(path, size, tensors.data_end)
    return _info(path, meta, size, tensors)


def read_gguf_metadata(path: Path) -> dict[str, Scalar | None]:
    """Every metadata key of the GGUF file at ``path`` with its value; arrays (the vocabulary, merges) are None.

    Reads only the metadata, as ``read_chat_template`` does. Raises what ``read_chat_template`` raises.
    """
    return _read(Path(path), _parse_metadata)


def _parse_metadata(path: Path, buf: mmap.mmap, size: int) -> dict[str, Scalar | None]:
    try:
        _, _, meta = _read_metadata(path, buf)
    except _Truncated:
        raise _truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise _unreadable(path, exc) from exc
    return meta


def _parse_chat_template(path: Path, buf: mmap.mmap, size: int) -> str | None:
    template = _parse_metadata(path, buf, size).get(_CHAT_TEMPLATE)
    return template if isinstance(template, str) else None


def _read_metadata(
    path: Path, buf: mmap.mmap, tokens_among: frozenset[bytes] = frozenset()
) -> tuple[_Header, int, dict[str, Scalar | None]]:
    """Read the header up to the tensor table: the cursor (left at the table), the tensor count, the metadata.

    Arrays are skipped and read as None; the cursor's ``tokens_found`` holds those of ``tokens_among`` that are
    tokens of the vocabulary. Raises _Truncated, ValueError or struct.error for a damaged
    header, and ModelLoadError for a format version too old to load.
    """
    header = _Header(buf, _byte_order(buf))
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


def read_gguf_tensors(path: Path) -> tuple[tuple[TensorEntry, ...], int]:
    """A GGUF's tensor table and the byte offset where tensor data starts. Metadata arrays (the vocabulary) are
    skipped, weights never read: a header the ``gguf`` package's reader takes seconds over is read in
    milliseconds. Raises ModelLoadError for a file that is not a readable GGUF."""
    return _read(path, _parse_tensors)


def _parse_tensors(path: Path, buf: mmap.mmap, size: int) -> tuple[tuple[TensorEntry, ...], int]:
    try:
        header, n_tensors, meta = _read_metadata(path, buf)
        entries = []
        for _ in range(n_tensors):
            name = header.string()
            n_dims = header.u32()
            if n_dims > 16:
                raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
            shape = tuple(header.u64() for _ in range(n_dims))
            entries.append(TensorEntry(name, shape, header.u32()))
            header.u64()  # the data offset
    except _Truncated:
        raise _truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise _unreadable(path, exc) from exc
    return tuple(entries), -(-header.pos // _alignment(meta)) * _alignment(meta)


def _alignment(meta: dict[str, Scalar | None]) -> int:
    alignment = meta.get("general.alignment")
    return alignment if isinstance(alignment, int) and alignment > 0 else gguf.GGUF_DEFAULT_ALIGNMENT


def _byte_order(buf: mmap.mmap) -> str:
    """'<' or '>': a version that reads as a huge number in little-endian means a big-endian file."""
    if len(buf) < 8:
        raise _Truncated
    (little,) = struct.unpack_from("<I", buf, 4)
    return "<" if little & 0xFFFF else ">"


def _walk_tensor_table(header: _Header, n_tensors: int, meta: dict[str, Scalar | None]) -> _TensorTable:
    """Walk the tensor table: where the last tensor's data ends, and how many elements the tensors hold."""
    align = _alignment(meta)
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
    return _TensorTable(data_end=data_start + end_rel, parameters=parameters, n_tensors=n_tensors)


def _tensor_bytes(ttype: int, elements: int) -> int:
    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
    except (ValueError, KeyError):
        log.debug("unknown tensor type %d: its size is not checked", ttype)
        return 0
    return elements // int(block) * int(type_size)


def _unreadable(path: Path, exc: Exception) -> ModelLoadError:
    return ModelLoadError(
        f"{path} has a GGUF header that cannot be read: {exc}",
        hint="the file is damaged; download or convert it again",
    )


def _truncated(path: Path, size: int, needed: int | None) -> ModelLoadError:
    detail = f": it has {size} bytes but its tensors need {needed}" if needed else ""
    return ModelLoadError(
        f"{path} is a truncated GGUF file{detail}",
        hint="the file is incomplete (an interrupted download?); get it again",
    )


def _info(path: Path, meta: dict[str, Scalar | None], size: int, tensors: _TensorTable) -> GGUFInfo:
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelLoadError(
            f"{path} does not say its architecture (general.architecture)",
            hint="the file was not written by a GGUF converter localinfer knows; convert the model again",
        )
    split_count = _int_or_none(meta.get("split.count"))
    whole = tensors.n_tensors > 0 and (split_count is None or split_count <= 1)
    return GGUFInfo(
        architecture=arch,
        quantization=_quantization(meta.get("general.file_type")),
        context_length=_int_or_none(meta.get(f"{arch}.context_length")),
        block_count=_int_or_none(meta.get(f"{arch}.block_count")),
        has_chat_template=isinstance(meta.get(_CHAT_TEMPLATE), str),
        name=_text_or_none(meta.get("general.name")),
        size_bytes=size,
        parameters=tensors.parameters if whole else None,
        fim=any(all(_int_or_none(meta.get(key)) is not None for key in keys) for keys in _FIM_KEY_SETS),
        license=_text_or_none(meta.get("general.license")),
        embedding_length=_int_or_none(meta.get(f"{arch}.embedding_length")),
        head_count=_int_or_none(meta.get(f"{arch}.attention.head_count")),
        head_count_kv=_int_or_none(meta.get(f"{arch}.attention.head_count_kv")),
        split_count=split_count,
        key_length=_int_or_none(meta.get(f"{arch}.attention.key_length")),
        value_length=_int_or_none(meta.get(f"{arch}.attention.value_length")),
        sliding_window=_int_or_none(meta.get(f"{arch}.attention.sliding_window")),
        basename=_text_or_none(meta.get("general.basename")),
        size_label=_text_or_none(meta.get("general.size_label")),
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


def _text_or_none(value: Scalar | None) -> str | None:
    """A non-empty string value, else None."""
    return value if isinstance(value, str) and value else None
