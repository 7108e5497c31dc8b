"""Read the few GGUF metadata fields localinfer needs, fast, and tell a broken file from a good one.

The header is walked by gguf_file.py, keeping only scalar and string values and skipping arrays (a tokenizer
vocabulary), so a model's facts are read in milliseconds where the ``gguf`` package's reader takes seconds. Tensor
data is never read: the tensor table (gguf_tensors.py) is walked only to count parameters and to check that the
file holds all the bytes it promises.
"""

from __future__ import annotations

import functools
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf

from localinfer.errors import ModelLoadError
from localinfer.models.metadata.gguf_file import (
    Scalar,
    Truncated,
    read_gguf_file,
    read_metadata,
    truncated,
    unreadable,
)
from localinfer.models.metadata.gguf_tensors import TensorTable, walk_tensor_table
from localinfer.models.metadata.thinking import MARKER_TOKENS, thinking_markers
from localinfer.types import ThinkingMarkers

# Fill-in-the-middle: a file declares it with all three token ids, under today's keys or the older ones.
_FIM_KEY_SETS = (
    ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id"),
    ("tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id", "tokenizer.ggml.middle_token_id"),
)
_CHAT_TEMPLATE = "tokenizer.chat_template"


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


def read_gguf_info(path: Path) -> GGUFInfo:
    """Read ``path``'s GGUF metadata and check the file is complete, without reading tensor data.

    Raises ModelNotFound when there is no such file, and ModelLoadError when it is not a GGUF file, is
    truncated, or has a header that cannot be parsed.
    """
    return read_gguf_file(Path(path), _parse)


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
    return read_gguf_file(Path(path), _parse_chat_template)


def read_gguf_thinking(path: Path) -> ThinkingMarkers | None:
    """How the model of the GGUF file at ``path`` marks its thinking, from its chat template and its vocabulary (a
    text is one token when the token list holds it), as metadata/thinking.py decides; None for a model that does
    not reason. The model is not loaded. Raises what ``read_chat_template`` raises."""
    return read_gguf_file(Path(path), _parse_thinking)


def _parse_thinking(path: Path, buf: mmap.mmap, size: int) -> ThinkingMarkers | None:
    wanted = frozenset(text.encode() for text in MARKER_TOKENS)
    try:
        header, _, meta = read_metadata(path, buf, tokens_among=wanted)
    except Truncated:
        raise truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise unreadable(path, exc) from exc
    template = meta.get(_CHAT_TEMPLATE)
    return thinking_markers(
        template if isinstance(template, str) else None, lambda t: t.encode() in header.tokens_found
    )


def _parse(path: Path, buf: mmap.mmap, size: int) -> GGUFInfo:
    try:
        header, n_tensors, meta = read_metadata(path, buf)
        tensors = walk_tensor_table(header, n_tensors, meta)
    except Truncated:
        raise truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise unreadable(path, exc) from exc
    if tensors.data_end > size:
        raise truncated(path, size, tensors.data_end)
    return _info(path, meta, size, tensors)


def read_gguf_metadata(path: Path) -> dict[str, Scalar | None]:
    """Every metadata key of the GGUF file at ``path`` with its value; arrays (the vocabulary, merges) are None.

    Reads only the metadata, as ``read_chat_template`` does. Raises what ``read_chat_template`` raises.
    """
    return read_gguf_file(Path(path), _parse_metadata)


def _parse_metadata(path: Path, buf: mmap.mmap, size: int) -> dict[str, Scalar | None]:
    try:
        _, _, meta = read_metadata(path, buf)
    except Truncated:
        raise truncated(path, size, None) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise unreadable(path, exc) from exc
    return meta


def _parse_chat_template(path: Path, buf: mmap.mmap, size: int) -> str | None:
    template = _parse_metadata(path, buf, size).get(_CHAT_TEMPLATE)
    return template if isinstance(template, str) else None


def _info(path: Path, meta: dict[str, Scalar | None], size: int, tensors: TensorTable) -> GGUFInfo:
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
