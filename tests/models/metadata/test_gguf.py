"""read_gguf_info and read_chat_template: metadata from real and tiny GGUF files, clear errors for broken ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from localinfer.errors import ModelLoadError, ModelNotFound
from localinfer.models.metadata import read_chat_template, read_gguf_info
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


def test_parameters_is_the_element_count_of_the_tensor(make_gguf: MakeGGUF) -> None:
    assert read_gguf_info(make_gguf(tensor_elements=4096)).parameters == 4096


def test_parameters_sums_the_element_counts_of_all_tensors(tmp_path: Path) -> None:
    path = tmp_path / "two-tensors.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((8, 16), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.zeros(16, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert read_gguf_info(path).parameters == 8 * 16 + 16


def test_parameters_is_none_for_one_shard_of_a_split_model(make_gguf: MakeGGUF) -> None:
    info = read_gguf_info(make_gguf(metadata={"split.count": 3}))
    assert (info.split_count, info.parameters) == (3, None)


def test_split_count_is_none_for_a_file_that_is_not_split(make_gguf: MakeGGUF) -> None:
    assert read_gguf_info(make_gguf()).split_count is None


def test_fim_is_true_when_prefix_suffix_and_middle_token_ids_are_declared(make_gguf: MakeGGUF) -> None:
    assert read_gguf_info(make_gguf(fim_token_ids=(1, 2, 3))).fim is True


def test_fim_is_true_with_the_older_prefix_suffix_middle_keys(make_gguf: MakeGGUF) -> None:
    older = {
        "tokenizer.ggml.prefix_token_id": 1,
        "tokenizer.ggml.suffix_token_id": 2,
        "tokenizer.ggml.middle_token_id": 3,
    }
    assert read_gguf_info(make_gguf(metadata=older)).fim is True


def test_fim_is_false_without_fim_token_ids(make_gguf: MakeGGUF) -> None:
    assert read_gguf_info(make_gguf()).fim is False


def test_fim_is_false_when_one_of_the_three_token_ids_is_missing(make_gguf: MakeGGUF) -> None:
    partial = {"tokenizer.ggml.fim_pre_token_id": 1, "tokenizer.ggml.fim_suf_token_id": 2}
    assert read_gguf_info(make_gguf(metadata=partial)).fim is False


def test_reads_license_basename_and_size_label(make_gguf: MakeGGUF) -> None:
    path = make_gguf(license="mit", metadata={"general.basename": "tiny", "general.size_label": "4K"})
    info = read_gguf_info(path)
    assert (info.license, info.basename, info.size_label) == ("mit", "tiny", "4K")


def test_license_basename_and_size_label_are_none_when_not_stated(make_gguf: MakeGGUF) -> None:
    info = read_gguf_info(make_gguf())
    assert (info.license, info.basename, info.size_label) == (None, None, None)


def test_reads_embedding_length_and_attention_head_counts(make_gguf: MakeGGUF) -> None:
    info = read_gguf_info(make_gguf(arch="qwen2", embedding_length=64, head_count=8, head_count_kv=2))
    assert (info.embedding_length, info.head_count, info.head_count_kv) == (64, 8, 2)


def test_head_counts_given_per_layer_are_none(make_gguf: MakeGGUF) -> None:
    info = read_gguf_info(make_gguf(block_count=3, head_count=[8, 8, 4], head_count_kv=[2, 2, 1]))
    assert (info.head_count, info.head_count_kv) == (None, None)


def test_embedding_length_and_head_counts_are_none_when_not_stated(make_gguf: MakeGGUF) -> None:
    info = read_gguf_info(make_gguf())
    assert (info.embedding_length, info.head_count, info.head_count_kv) == (None, None, None)


def test_read_chat_template_returns_the_template_text(make_gguf: MakeGGUF) -> None:
    template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    assert read_chat_template(make_gguf(chat_template=template)) == template


def test_read_chat_template_is_none_without_a_template(make_gguf: MakeGGUF) -> None:
    assert read_chat_template(make_gguf(chat_template=None)) is None


def test_read_chat_template_skips_a_large_vocabulary_quickly(make_gguf: MakeGGUF) -> None:
    path = make_gguf(vocab=200_000)
    start = time.perf_counter()
    read_chat_template(path)
    assert time.perf_counter() - start < 1.0


def test_read_chat_template_of_a_file_that_is_not_gguf_raises_model_load_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("hello, this is text")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        read_chat_template(path)


def test_read_chat_template_of_a_file_cut_inside_the_header_raises_truncated(
    make_gguf: MakeGGUF, tmp_path: Path
) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(make_gguf().read_bytes()[:200])
    with pytest.raises(ModelLoadError, match="truncated"):
        read_chat_template(cut)


def test_read_chat_template_of_a_missing_file_raises_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        read_chat_template(tmp_path / "nope.gguf")


@pytest.mark.model
def test_smollm2_is_a_llama_q4_1_model_with_a_chat_template(smollm2: Manifest) -> None:
    info = read_gguf_info(smollm2.path)
    assert (info.architecture, info.quantization, info.has_chat_template) == ("llama", "Q4_1", True)


@pytest.mark.model
def test_gemma3_is_a_gemma3_q4_k_m_model(gemma3: Manifest) -> None:
    info = read_gguf_info(gemma3.path)
    assert (info.architecture, info.quantization, info.context_length) == ("gemma3", "Q4_K_M", 32768)


@pytest.mark.model
def test_smollm2_has_134_5m_parameters_and_its_architecture_facts(smollm2: Manifest) -> None:
    info = read_gguf_info(smollm2.path)
    assert (info.parameters, info.embedding_length, info.head_count, info.head_count_kv, info.block_count) == (
        134_515_008,
        576,
        9,
        3,
        30,
    )


@pytest.mark.model
def test_smollm2_states_its_license_basename_and_size_label_and_no_fim(smollm2: Manifest) -> None:
    info = read_gguf_info(smollm2.path)
    assert (info.license, info.basename, info.size_label, info.fim, info.split_count) == (
        "apache-2.0",
        "smollm2",
        "135M",
        False,
        None,
    )


@pytest.mark.model
def test_smollm2_chat_template_is_chatml_with_a_default_system_prompt(smollm2: Manifest) -> None:
    template = read_chat_template(smollm2.path)
    assert template is not None
    assert template.startswith("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}")
    assert "<|im_start|>" in template


@pytest.mark.model
def test_gemma3_has_268m_parameters_and_its_architecture_facts(gemma3: Manifest) -> None:
    info = read_gguf_info(gemma3.path)
    assert (info.parameters, info.embedding_length, info.head_count, info.head_count_kv, info.block_count) == (
        268_098_176,
        640,
        4,
        1,
        18,
    )


@pytest.mark.model
def test_gemma3_states_the_gemma_license_and_has_no_chat_template_or_fim(gemma3: Manifest) -> None:
    info = read_gguf_info(gemma3.path)
    assert (info.license, info.basename, info.size_label, info.has_chat_template, info.fim) == (
        "gemma",
        "gemma-3",
        "270M",
        False,
        False,
    )


@pytest.mark.model
def test_read_chat_template_of_gemma3_is_none(gemma3: Manifest) -> None:
    assert read_chat_template(gemma3.path) is None
