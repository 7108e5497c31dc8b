"""The fields read from a folder model's JSON files: Hugging Face ``config.json`` and ONNX ``genai_config.json``
(metadata.hf and metadata.onnx); the backends turn them into ModelFacts."""

from __future__ import annotations

import json
from pathlib import Path

from localinfer.models.metadata import hf, onnx
from localinfer.models.metadata.folder import weights_bytes as folder_weights_bytes
from tests.hf_folder import CONTEXT, write_hf_folder


def test_a_hugging_face_config_names_its_context_and_architecture(tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "qwen")
    config = hf.read_json(folder / "config.json")
    assert hf.trained_context(config) == CONTEXT
    assert hf.architecture(config) == "Qwen2ForCausalLM"
    assert hf.weights_bytes(folder) == (folder / "model.safetensors").stat().st_size


def test_a_multimodal_config_has_its_language_models_context_and_unknowns_read_as_such() -> None:
    assert hf.trained_context({"text_config": {"max_position_embeddings": 8192}}) == 8192
    assert hf.trained_context({"max_position_embeddings": "many"}) == 0
    assert hf.architecture({"model_type": "gemma3"}) == "gemma3"
    assert hf.architecture({}) == "unknown"
    assert (hf.positive("12"), hf.positive(True), hf.positive(-3), hf.positive(None)) == (12, 0, 0, 0)


def test_an_index_total_size_is_the_weights_size(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1234}}))
    assert hf.weights_bytes(tmp_path) == 1234


def test_a_built_tensorrt_llm_engine_weighs_its_rank_engine_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"build_config": {}, "pretrained_config": {}}))
    (tmp_path / "rank0.engine").write_bytes(b"x" * 30)
    (tmp_path / "rank1.engine").write_bytes(b"x" * 12)
    assert hf.weights_bytes(tmp_path) == 42
    assert folder_weights_bytes(tmp_path, "hf") == 42


def test_genai_config_context_window_and_weights(tmp_path: Path) -> None:
    config = {"model": {"context_length": 2048, "decoder": {"sliding_window": {"window_size": 512}}}}
    assert (onnx.trained_context(config), onnx.sliding_window(config)) == (2048, 512)
    assert (onnx.trained_context({}), onnx.sliding_window({})) == (onnx.DEFAULT_CONTEXT, 0)
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    (tmp_path / "model.onnx").write_bytes(b"x" * 10)
    (tmp_path / "model.onnx.data").write_bytes(b"x" * 5)
    assert onnx.weights_bytes(tmp_path) == 15
    assert onnx.model_folder(tmp_path / "genai_config.json") == onnx.model_folder(tmp_path) == tmp_path


def test_bos_is_added_as_the_tokenizer_config_or_post_processor_says(tmp_path: Path) -> None:
    assert onnx.adds_bos(tmp_path, {"add_bos_token": True}, "<s>")
    assert not onnx.adds_bos(tmp_path, {}, "<s>")
    post = {"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}]}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(post))
    assert onnx.adds_bos(tmp_path, {}, "<s>")
