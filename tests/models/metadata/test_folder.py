"""A folder model's facts come from its config and safetensors headers; what they do not say is None."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localinfer.errors import ModelLoadError
from localinfer.models.metadata import cached_folder_facts, folder_format, read_folder_facts
from tests.hf_folder import PARAMETERS, write_hf_folder, write_safetensors


def test_the_format_is_read_from_the_folder_or_its_config_file(tmp_path: Path) -> None:
    hf = write_hf_folder(tmp_path / "hf")
    onnx = tmp_path / "onnx"
    onnx.mkdir()
    (onnx / "genai_config.json").write_text("{}")
    assert [folder_format(p) for p in (hf, hf / "config.json", onnx, onnx / "genai_config.json")] == [
        "hf",
        "hf",
        "onnx",
        "onnx",
    ]
    assert folder_format(tmp_path) is None
    assert folder_format(hf / "model.safetensors") is None


def test_a_sharded_folder_counts_the_shards_its_index_maps_not_a_consolidated_copy(tmp_path: Path) -> None:
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    folder = write_hf_folder(tmp_path / "sharded")
    (folder / "model.safetensors").rename(folder / first)
    write_safetensors(folder / second, {"lm_head.weight": [4096, 256]})
    write_safetensors(folder / "consolidated.safetensors", {"everything": [10_000_000]})
    weight_map = {"model.norm.weight": first, "lm_head.weight": second}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert read_folder_facts(folder).parameters == PARAMETERS + 4096 * 256


def test_weights_that_are_not_safetensors_leave_the_parameter_count_unknown(tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "garbage")
    (folder / "model.safetensors").write_bytes(b"not a safetensors file at all")
    facts = read_folder_facts(folder)
    assert (facts.parameters, facts.architecture, facts.block_count) == (None, "Qwen2ForCausalLM", 2)


def test_gpt2_style_config_keys_are_read(tmp_path: Path) -> None:
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 12, "n_embd": 768}
    config |= {"n_head": 12, "n_positions": 1024, "vocab_size": 50257}
    facts = read_folder_facts(write_hf_folder(tmp_path / "gpt2", config_text=json.dumps(config), chat_template=None))
    assert (facts.family, facts.block_count, facts.embedding_length, facts.head_count, facts.head_count_kv) == (
        "gpt2",
        12,
        768,
        12,
        12,  # no num_key_value_heads: every head has its own keys and values
    )
    assert facts.head_length == 64
    assert (facts.context_length, facts.vocab_size, facts.quantization, facts.has_chat_template) == (
        1024,
        50257,
        None,
        False,
    )


def test_a_folder_that_is_not_a_model_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="is not a model folder localinfer knows"):
        read_folder_facts(tmp_path)


def test_cached_facts_are_read_again_when_the_config_changes(tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "m")
    assert cached_folder_facts(folder / "config.json").block_count == 2
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 24}, indent=4))
    assert cached_folder_facts(folder / "config.json").block_count == 24
