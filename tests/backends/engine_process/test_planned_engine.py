"""The engine a Hugging Face folder is planned on is the one that will serve it: a built TensorRT-LLM engine folder
is planned on TensorRT-LLM (its GPU rule, its availability) without ``--engine trtllm``, on machines described by
hand as tests/hardware does."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.errors import ModelLoadError
from localinfer.hardware.profile import BackendAvailability, HardwareProfile
from localinfer.models.store import ModelStore, hf_manifest
from tests.backends.engine_process.conftest import write_trtllm_engine
from tests.hardware.profiles import HARDWARE

TRTLLM = BackendAvailability("trtllm", True, "trtllm-serve 1.0.0 on PATH", "1.0.0")


def with_trtllm(machine: str) -> HardwareProfile:
    hw = HARDWARE[machine]
    return dataclasses.replace(hw, backends=(*hw.backends, TRTLLM))


def test_a_built_tensorrt_llm_engine_folder_is_planned_on_tensorrt_llm_without_being_asked(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    manifest = hf_manifest(write_trtllm_engine(tmp_path / "llama-engine"), name="llama-engine")
    store.register(manifest)
    settings = Settings(home=tmp_path, discover=False)
    # a 24 GiB GPU, under vLLM's 40 GiB, with TensorRT-LLM installed: TensorRT-LLM's rule lets it run
    Engine(settings, store, hardware=with_trtllm("RTX 4090 24 GB")).check_plan(manifest)
    # vLLM installed but not TensorRT-LLM: vLLM cannot run a built engine, so the plan names what is missing
    with pytest.raises(ModelLoadError) as refused:
        Engine(settings, store, hardware=HARDWARE["H100 80 GB with vLLM"]).check_plan(manifest)
    assert refused.value.message == "the trtllm backend is not available here: trtllm was not probed"
