"""split_gguf writes parts like llama-gguf-split: named alike, metadata and tensors intact, loaded by llama.cpp."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gguf
import llama_cpp
import numpy as np
import pytest

from localinfer.models.store import Manifest
from tests.gguf_split import split_gguf

PROMPT = "The three primary colors are"
SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
# One thread: llama.cpp's threads spin-wait on each other, and on a busy two-core machine two of them ran 10-70 times
# slower than one.
LLAMA_ARGS: dict[str, Any] = {"n_ctx": 256, "n_threads": 1, "verbose": False}


def write_source(path: Path) -> Path:
    """A small GGUF with a key of every scalar type, arrays of four item types and tensors of four types."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("split test")
    writer.add_uint8("test.u8", 200)
    writer.add_int8("test.i8", -100)
    writer.add_uint16("test.u16", 60_000)
    writer.add_int16("test.i16", -30_000)
    writer.add_uint32("test.u32", 4_000_000_000)
    writer.add_int32("test.i32", -2_000_000_000)
    writer.add_float32("test.f32", 0.1)
    writer.add_uint64("test.u64", 2**63 + 1)
    writer.add_int64("test.i64", -(2**62))
    writer.add_float64("test.f64", 0.1)
    writer.add_bool("test.bool", True)
    writer.add_key_value("test.empty_string", "", gguf.GGUFValueType.STRING)
    writer.add_array("test.strings", ["a", "béta", ""])
    writer.add_key_value("test.u32s", [1, 2, 3], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT32)
    writer.add_array("test.floats", [0.5, -1.25])
    writer.add_array("test.bools", [True, False])
    writer.add_token_list([f"tok{i}" for i in range(50)])
    rng = np.random.default_rng(0)
    writer.add_tensor("a.f32", np.arange(64, dtype=np.float32).reshape(4, 16))
    writer.add_tensor("b.f16", np.linspace(-1, 1, 32).astype(np.float16))
    weights = rng.standard_normal((2, 64)).astype(np.float32)
    writer.add_tensor(
        "c.q8_0",
        gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0),
        raw_dtype=gguf.GGMLQuantizationType.Q8_0,
    )
    writer.add_tensor("d.i32", np.arange(8, dtype=np.int32))
    writer.add_tensor("e.f32", rng.standard_normal((3, 8)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def metadata(path: Path) -> dict[str, tuple[list[gguf.GGUFValueType], Any]]:
    """Every key of the file (the reader's GGUF.* header fields aside): its types and value."""
    fields = gguf.GGUFReader(path).fields.values()
    return {f.name: (f.types, f.contents()) for f in fields if not f.name.startswith("GGUF.")}


def tensors(*paths: Path) -> list[tuple[str, gguf.GGMLQuantizationType, list[int], bytes]]:
    """The tensors of the files, in order: name, type, shape and bytes."""
    return [
        (t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for p in paths for t in gguf.GGUFReader(p).tensors
    ]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_source(tmp_path / "source.gguf")


def test_parts_are_named_stem_then_number_of_count(source: Path, tmp_path: Path) -> None:
    parts = split_gguf(source, tmp_path / "out", "model", 3)
    assert [p.name for p in parts] == [
        "model-00001-of-00003.gguf",
        "model-00002-of-00003.gguf",
        "model-00003-of-00003.gguf",
    ]


def test_dest_dir_holds_only_the_parts_afterwards(source: Path, tmp_path: Path) -> None:
    parts = split_gguf(source, tmp_path / "out", "model", 3)
    assert sorted((tmp_path / "out").iterdir()) == parts


def test_first_part_holds_every_key_with_its_type_and_value(source: Path, tmp_path: Path) -> None:
    first = split_gguf(source, tmp_path / "out", "model", 2)[0]
    copied = {key: value for key, value in metadata(first).items() if not key.startswith("split.")}
    assert copied == metadata(source)


def test_every_part_carries_its_number_the_count_and_the_tensor_total(source: Path, tmp_path: Path) -> None:
    parts = split_gguf(source, tmp_path / "out", "model", 3)
    found = [[metadata(part)[key] for key in SPLIT_KEYS] for part in parts]
    u16, i32 = [gguf.GGUFValueType.UINT16], [gguf.GGUFValueType.INT32]
    assert found == [[(u16, number), (u16, 3), (i32, 5)] for number in range(3)]


def test_later_parts_hold_only_the_split_keys(source: Path, tmp_path: Path) -> None:
    parts = split_gguf(source, tmp_path / "out", "model", 3)
    assert [sorted(metadata(part)) for part in parts[1:]] == [sorted(SPLIT_KEYS)] * 2


def test_parts_hold_every_tensor_in_order_with_its_type_shape_and_bytes(source: Path, tmp_path: Path) -> None:
    parts = split_gguf(source, tmp_path / "out", "model", 3)
    assert tensors(*parts) == tensors(source)


def test_every_part_holds_at_least_one_tensor(source: Path, tmp_path: Path) -> None:
    parts = split_gguf(source, tmp_path / "out", "model", 5)
    assert [len(gguf.GGUFReader(part).tensors) for part in parts] == [1] * 5


def test_strings_that_are_not_utf8_are_copied_byte_for_byte(tmp_path: Path) -> None:
    raw = [b"\xff\xfe", b"ok", b"\xc3"]
    writer = gguf.GGUFWriter(str(tmp_path / "raw.gguf"), "llama")
    writer.add_key_value("test.raw", raw, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.STRING)
    writer.add_tensor("a", np.zeros(4, dtype=np.float32))
    writer.add_tensor("b", np.ones(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    field = gguf.GGUFReader(split_gguf(tmp_path / "raw.gguf", tmp_path / "out", "raw", 2)[0]).fields["test.raw"]
    assert [bytes(field.parts[i]) for i in field.data] == raw


def test_a_custom_alignment_is_kept(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(str(tmp_path / "aligned.gguf"), "llama")
    writer.add_custom_alignment(64)
    writer.add_tensor("a", np.arange(3, dtype=np.float32))
    writer.add_tensor("b", np.arange(5, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    first, second = split_gguf(tmp_path / "aligned.gguf", tmp_path / "out", "aligned", 2)
    reader = gguf.GGUFReader(first)
    assert (reader.alignment, reader.data_offset % 64, tensors(first, second)) == (
        64,
        0,
        tensors(tmp_path / "aligned.gguf"),
    )


def test_more_parts_than_tensors_is_refused(source: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="into 6 parts"):
        split_gguf(source, tmp_path / "out", "model", 6)


def test_splitting_a_part_is_refused(source: Path, tmp_path: Path) -> None:
    first = split_gguf(source, tmp_path / "out", "model", 2)[0]
    with pytest.raises(ValueError, match="one part of a split model"):
        split_gguf(first, tmp_path / "again", "model", 2)


def test_a_failed_split_leaves_nothing_in_dest_dir(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tensor_data = gguf.GGUFWriter.write_tensor_data
    written: list[object] = []

    def fail_on_the_fourth_tensor(writer: gguf.GGUFWriter, tensor: Any, **kwargs: Any) -> None:
        if len(written) == 3:
            raise OSError("No space left on device")
        written.append(tensor)
        write_tensor_data(writer, tensor, **kwargs)

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensor_data", fail_on_the_fourth_tensor)
    with pytest.raises(OSError, match="No space left"):
        split_gguf(source, tmp_path / "out", "model", 3)
    assert list((tmp_path / "out").iterdir()) == []


# -- a real model, loaded by llama.cpp -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_parts(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """SmolLM2 split in two, once for the module."""
    return split_gguf(smollm2.path, tmp_path_factory.mktemp("smollm2-split"), "smollm2", 2)


def complete(model: Path) -> str:
    """Greedy completion of PROMPT, 12 tokens, by llama.cpp with the model loaded from ``model``; freed after."""
    llm = llama_cpp.Llama(model_path=str(model), **LLAMA_ARGS)
    try:
        result = llm.create_completion(PROMPT, max_tokens=12, temperature=0)
        assert isinstance(result, dict)
        return result["choices"][0]["text"]
    finally:
        llm.close()


@pytest.mark.model
def test_smollm2_is_split_into_two_parts_named_like_llama_gguf_split(smollm2_parts: list[Path]) -> None:
    assert [p.name for p in smollm2_parts] == ["smollm2-00001-of-00002.gguf", "smollm2-00002-of-00002.gguf"]


@pytest.mark.model
def test_each_smollm2_part_is_a_gguf_with_the_split_keys(smollm2_parts: list[Path]) -> None:
    readers = [gguf.GGUFReader(part) for part in smollm2_parts]
    total = sum(len(reader.tensors) for reader in readers)
    found = [[reader.fields[key].contents() for key in SPLIT_KEYS] for reader in readers]
    assert found == [[0, 2, total], [1, 2, total]]


@pytest.mark.model
def test_llama_cpp_generates_the_same_text_from_the_first_part_as_from_the_original(
    smollm2_parts: list[Path], smollm2: Manifest
) -> None:
    from_parts, from_original = complete(smollm2_parts[0]), complete(smollm2.path)
    assert (from_parts, bool(from_original.strip())) == (from_original, True)


@pytest.mark.model
def test_llama_cpp_refuses_the_first_part_without_the_second(smollm2_parts: list[Path], tmp_path: Path) -> None:
    alone = tmp_path / smollm2_parts[0].name
    os.link(smollm2_parts[0], alone)
    with pytest.raises(ValueError, match="Failed to load model"):
        llama_cpp.Llama(model_path=str(alone), **LLAMA_ARGS)
