"""The engine serves each model on the backend its format maps to: GGUF on llama.cpp, ONNX on ONNX Runtime,
Hugging Face folders on vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localinfer.backends.engine_process.engines import SglangBackend, VllmBackend
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.rpc.child import RpcChildBackend
from localinfer.backends.onnx.backend import OnnxBackend
from localinfer.backends.registry import DEFAULT_BACKENDS, backend_for, backends_for
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.errors import ModelLoadError
from localinfer.models.store import Manifest, ModelFile, ModelStore, hf_manifest
from tests.hardware.profiles import HARDWARE
from tests.idle_backend import IdleBackend


def manifest(name: str, fmt: str, path: Path) -> Manifest:
    return Manifest(name, f"file:{path}", fmt, (ModelFile(path, 0, None),), None, 0)


def test_the_default_table_maps_gguf_to_llamacpp_onnx_to_onnx_runtime_and_hf_to_vllm(tmp_path: Path) -> None:
    assert isinstance(backend_for(manifest("a", "gguf", tmp_path / "a.gguf"), DEFAULT_BACKENDS), LlamaCppBackend)
    assert isinstance(backend_for(manifest("b", "onnx", tmp_path / "b"), DEFAULT_BACKENDS), OnnxBackend)
    assert isinstance(backend_for(manifest("c", "hf", tmp_path / "c" / "config.json"), DEFAULT_BACKENDS), VllmBackend)


def test_a_gguf_model_on_rpc_workers_is_served_by_a_child_unless_asked_in_process(tmp_path: Path) -> None:
    gguf = manifest("a", "gguf", tmp_path / "a.gguf")
    on_workers = Settings(home=tmp_path, rpc="127.0.0.1:50052", rpc_stall_timeout=7)
    child = backend_for(gguf, backends_for(on_workers))
    assert isinstance(child, RpcChildBackend)
    assert child._stall == 7 and child._home == tmp_path
    in_process = Settings(home=tmp_path, rpc="127.0.0.1:50052", rpc_in_process=True)
    assert isinstance(backend_for(gguf, backends_for(in_process)), LlamaCppBackend)
    assert isinstance(backend_for(gguf, backends_for(Settings(home=tmp_path))), LlamaCppBackend)


def test_the_settings_engine_serves_hugging_face_folders(tmp_path: Path) -> None:
    folder = manifest("c", "hf", tmp_path / "c" / "config.json")
    assert isinstance(backend_for(folder, backends_for(Settings(home=tmp_path, engine="sglang"))), SglangBackend)


def test_a_format_no_backend_serves_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no backend here serves mlx models"):
        backend_for(manifest("c", "mlx", tmp_path / "c"), DEFAULT_BACKENDS)


async def test_a_folder_model_is_planned_for_vllm_with_its_name_and_the_engine_args(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "max_position_embeddings": 32768}))
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    settings = Settings(home=tmp_path, discover=False, engine_args=["--enforce-eager"])
    backend = IdleBackend("hf")
    h100 = HARDWARE["H100 80 GB with vLLM"]
    engine = Engine(settings, ModelStore(settings.models_dir), {"hf": lambda: backend}, hardware=h100)
    await engine.preload(hf_manifest(folder, name="org/tiny")).ready
    assert backend.spec is not None
    assert (backend.spec.name, backend.spec.path, backend.spec.ctx_size) == ("org/tiny", folder / "config.json", 8192)
    assert backend.spec.extra_args == ("--enforce-eager",)
    await engine.close()


async def test_a_folder_model_this_machine_cannot_run_fails_to_load_with_the_planners_reason(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    settings = Settings(home=tmp_path, discover=False)
    laptop = HARDWARE["laptop without GPU"]
    engine = Engine(settings, ModelStore(settings.models_dir), {"hf": lambda: IdleBackend("hf")}, hardware=laptop)
    with pytest.raises(ModelLoadError, match="needs vLLM, which needs an NVIDIA GPU"):
        await engine.preload(hf_manifest(folder)).ready


async def test_the_engine_picks_each_models_backend_by_its_format(tmp_path: Path) -> None:
    gguf, onnx = manifest("g", "gguf", tmp_path / "g.gguf"), manifest("o", "onnx", tmp_path / "o" / "genai_config.json")
    settings = Settings(home=tmp_path, discover=False)
    table = {"gguf": lambda: IdleBackend("gguf"), "onnx": lambda: IdleBackend("onnx")}
    engine = Engine(settings, ModelStore(settings.models_dir), table)
    for m in (gguf, onnx):
        await engine.preload(m).ready
    assert {m.name: m.facts.architecture for m in engine.loaded()} == {"g": "gguf", "o": "onnx"}
    await engine.close()


async def test_one_factory_still_serves_every_format(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, discover=False)
    engine = Engine(settings, ModelStore(settings.models_dir), lambda: IdleBackend("any"))
    await engine.preload(manifest("o", "onnx", tmp_path / "o" / "genai_config.json")).ready
    assert [m.facts.architecture for m in engine.loaded()] == ["any"]
    await engine.close()
