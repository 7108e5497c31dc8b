"""Split a GGUF file into parts the way ``llama-gguf-split --split`` does, so llama.cpp loads them from the first part.

The first part holds every metadata key of the source; every part holds the ``split.no`` (uint16, 0-based),
``split.count`` (uint16) and ``split.tensors.count`` (int32) keys and a run of the source's tensors, byte for byte.
Parts are named ``{stem}-00001-of-0000N.gguf``; llama.cpp, given the first, finds the others next to it.
"""

from __future__ import annotations

import bisect
import itertools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys, ReaderField, ReaderTensor

# llama.cpp's LLAMA_SPLIT_FILENAME_FORMAT / gguf's SHARD_NAME_FORMAT.
PART_NAME_FORMAT = "{stem}-{number:05d}-of-{count:05d}.gguf"
_MAX_PARTS = 0xFFFF  # split.count is a uint16


def part_names(stem: str, parts: int) -> list[str]:
    """The file names of the ``parts`` parts of ``stem``: ``{stem}-00001-of-0000N.gguf`` ..."""
    return [PART_NAME_FORMAT.format(stem=stem, number=i, count=parts) for i in range(1, parts + 1)]


def split_gguf(source: Path, dest_dir: Path, stem: str, parts: int) -> list[Path]:
    """Write ``source`` as ``parts`` GGUF files ``dest_dir/{stem}-0000i-of-0000N.gguf`` and return their paths in order.

    The first part carries all of the source's metadata keys with their exact types (arrays included; the ``GGUF.*``
    header fields and any ``split.*`` keys aside), later parts only the ``split.*`` keys, as ``llama-gguf-split``
    writes them. Tensors keep their order, quantization type, shape and bytes; each part gets a contiguous run of
    them, the runs about equal in bytes. The parts are written in a temporary folder inside ``dest_dir`` and then
    renamed into place (replacing files of those names), the first part last: a first part this run wrote is never
    left without the others, and a failed run removes its temporary folder.

    Raises ``ValueError`` if ``parts`` is not between 1 and the number of tensors, if the source is itself a part of
    a split model, or if it holds metadata the ``gguf`` writer cannot write (an empty or nested array).
    """
    reader = GGUFReader(source)
    if not 1 <= parts <= min(len(reader.tensors), _MAX_PARTS):
        raise ValueError(f"cannot split {len(reader.tensors)} tensors into {parts} parts")
    count_field = reader.get_field(Keys.Split.LLM_KV_SPLIT_COUNT)
    if count_field is not None and count_field.contents() > 1:
        raise ValueError(f"{source} is itself one part of a split model")
    architecture = reader.get_field(Keys.General.ARCHITECTURE)
    if architecture is None:
        raise ValueError(f"{source} has no {Keys.General.ARCHITECTURE}")
    metadata = [_copy_of(field) for field in reader.fields.values() if _is_copied(field.name)]

    dest_dir.mkdir(parents=True, exist_ok=True)
    finals = [dest_dir / name for name in part_names(stem, parts)]
    staging = Path(tempfile.mkdtemp(prefix=f".{stem}.split-", dir=dest_dir))
    try:
        for number, (final, tensors) in enumerate(zip(finals, _runs(reader.tensors, parts), strict=True)):
            writer = GGUFWriter(staging / final.name, str(architecture.contents()), endianess=reader.endianess)
            if number == 0:
                writer.data_alignment = int(reader.alignment)
                for key, value, value_type, sub_type in metadata:
                    writer.add_key_value(key, value, value_type, sub_type=sub_type)
            else:
                writer.kv_data[0].clear()  # no general.architecture either: only the split keys
            writer.add_uint16(Keys.Split.LLM_KV_SPLIT_NO, number)
            writer.add_uint16(Keys.Split.LLM_KV_SPLIT_COUNT, parts)
            writer.add_int32(Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, len(reader.tensors))
            for tensor in tensors:
                writer.add_tensor_info(
                    tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type
                )
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            for tensor in tensors:
                writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
            writer.close()
        for final in reversed(finals):
            os.replace(staging / final.name, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return finals


def _is_copied(key: str) -> bool:
    """Whether a source key goes to the first part: not the reader's ``GGUF.*`` header fields, not ``split.*``, and
    not ``general.architecture``, which ``GGUFWriter`` writes itself."""
    return not key.startswith(("GGUF.", "split.")) and key != Keys.General.ARCHITECTURE


def _copy_of(field: ReaderField) -> tuple[str, Any, GGUFValueType, GGUFValueType | None]:
    """The key, value, type and array item type to give ``GGUFWriter.add_key_value`` to write ``field`` unchanged.

    Strings are copied as their raw bytes, so a vocabulary entry that is not valid UTF-8 survives too.
    """
    value_type = field.types[0]
    if value_type == GGUFValueType.STRING:
        return field.name, bytes(field.parts[field.data[0]]), value_type, None
    if value_type != GGUFValueType.ARRAY:
        return field.name, field.contents(), value_type, None
    if len(field.types) != 2:
        raise ValueError(f"cannot copy {field.name}: the gguf writer cannot write an empty or nested array")
    item_type = field.types[1]
    if item_type == GGUFValueType.STRING:
        return field.name, [bytes(field.parts[i]) for i in field.data], value_type, item_type
    return field.name, field.contents(), value_type, item_type


def _runs(tensors: list[ReaderTensor], parts: int) -> list[list[ReaderTensor]]:
    """``tensors`` cut into ``parts`` contiguous, non-empty runs of about equal bytes."""
    cumulative = list(itertools.accumulate((tensor.n_bytes for tensor in tensors), initial=0))
    starts = [0]
    for k in range(1, parts):
        first_past_share = bisect.bisect_left(cumulative, cumulative[-1] * k / parts)
        starts.append(max(starts[-1] + 1, min(first_past_share, len(tensors) - (parts - k))))
    starts.append(len(tensors))
    return [tensors[start:end] for start, end in itertools.pairwise(starts)]
