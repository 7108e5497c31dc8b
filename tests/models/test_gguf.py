"""read_gguf_info: metadata from real and tiny GGUF files, and clear errors for broken ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import gguf
import pytest

from localinfer.errors import ModelLoadError, ModelNotFound
from localinfer.models.gguf import read_gguf_info
from localinfer.models.store import Manifest

MakeGGUF = Callable[..., Path]


def test_reads_architecture_context_blocks_and_name(make_gguf: MakeGGUF) -> None:
    path = make_gguf(arch="gemma3", context_length=512, block_count=3, name="Tiny Gemma")
    info = read_gguf_info(path)
    assert (info.architecture, info.context_length, info.block_count, info.name) == (
        "gemma3",
        512,
        3,
        "Tiny Gemma",
    )


def test_size_bytes_is_the_file_size(make_gguf: MakeGGUF) -> None:
    path = make_gguf()
    assert read_gguf_info(path).size_bytes == path.stat().st_size


@pytest.mark.parametrize(
    ("file_type", "expected"),
    [
        (gguf.LlamaFileType.MOSTLY_Q4_K_M, "Q4_K_M"),
        (gguf.LlamaFileType.MOSTLY_Q4_1, "Q4_1"),
        (gguf.LlamaFileType.MOSTLY_F16, "F16"),
        (gguf.LlamaFileType.ALL_F32, "F32"),
    ],
)
def test_quantization_is_the_file_type_name(make_gguf: MakeGGUF, file_type: gguf.LlamaFileType, expected: str) -> None:
    assert read_gguf_info(make_gguf(file_type=file_type)).quantization == expected


def test_quantization_is_none_without_a_file_type(make_gguf: MakeGGUF) -> None:
    assert read_gguf_info(make_gguf(file_type=None)).quantization is None


def test_name_is_none_without_general_name(make_gguf: MakeGGUF) -> None:
    assert read_gguf_info(make_gguf(name=None)).name is None


def test_chat_template_presence_is_reported(make_gguf: MakeGGUF) -> None:
    with_template = read_gguf_info(make_gguf("a.gguf"))
    without = read_gguf_info(make_gguf("b.gguf", chat_template=None))
    assert (with_template.has_chat_template, without.has_chat_template) == (True, False)


def test_a_large_vocabulary_is_skipped_quickly(make_gguf: MakeGGUF) -> None:
    path = make_gguf(vocab=200_000)
    start = time.perf_counter()
    read_gguf_info(path)
    assert time.perf_counter() - start < 1.0


def test_a_file_that_is_not_gguf_raises_model_load_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("hello, this is text")
    with pytest.raises(ModelLoadError, match="not a GGUF file") as excinfo:
        read_gguf_info(path)
    assert excinfo.value.hint


def test_an_empty_file_raises_model_load_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    path.touch()
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        read_gguf_info(path)


def test_a_file_cut_inside_tensor_data_raises_truncated(make_gguf: MakeGGUF, tmp_path: Path) -> None:
    data = make_gguf().read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(ModelLoadError, match="truncated") as excinfo:
        read_gguf_info(cut)
    assert excinfo.value.hint


def test_a_file_cut_inside_the_header_raises_truncated(make_gguf: MakeGGUF, tmp_path: Path) -> None:
    data = make_gguf().read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:200])
    with pytest.raises(ModelLoadError, match="truncated"):
        read_gguf_info(cut)


def test_a_missing_file_raises_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        read_gguf_info(tmp_path / "nope.gguf")


@pytest.mark.model
def test_smollm2_is_a_llama_q4_1_model_with_a_chat_template(smollm2: Manifest) -> None:
    info = read_gguf_info(smollm2.path)
    assert (info.architecture, info.quantization, info.has_chat_template) == ("llama", "Q4_1", True)


@pytest.mark.model
def test_gemma3_is_a_gemma3_q4_k_m_model(gemma3: Manifest) -> None:
    info = read_gguf_info(gemma3.path)
    assert (info.architecture, info.quantization, info.context_length) == ("gemma3", "Q4_K_M", 32768)
