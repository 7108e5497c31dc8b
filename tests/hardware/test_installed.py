"""Backend availability from the library probes' answers, and vLLM looked up without being imported."""

from __future__ import annotations

import sys

import pytest

from localinfer.hardware import installed as installed_module
from localinfer.hardware.installed import (
    llama_gpu_backends,
    llamacpp_availability,
    onnx_availability,
    vllm_availability,
)
from localinfer.hardware.profile import GiB, GPUInfo

CUDA_SYSTEM_INFO = "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : SSE3 = 1 | AVX2 = 1 | "
CPU_SYSTEM_INFO = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | OPENMP = 1 | REPACK = 1 | "


def h100(cc: tuple[int, int] = (9, 0)) -> GPUInfo:
    return GPUInfo("nvidia", "NVIDIA H100 80GB HBM3", 0, 80 * GiB, 79 * GiB, cc, "550.54.15", "cuda", source="nvml")


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Modules that ``is_installed`` says are there (add to the set), with version 9.9.9."""
    modules: set[str] = set()
    monkeypatch.setattr(installed_module, "is_installed", lambda module: module in modules)
    monkeypatch.setattr(installed_module, "installed_version", lambda *names: "9.9.9")
    return modules


def test_llama_cpp_system_info_names_its_gpu_backends() -> None:
    assert llama_gpu_backends(CUDA_SYSTEM_INFO) == ["CUDA"]
    assert llama_gpu_backends(CPU_SYSTEM_INFO) == []


def test_a_cuda_build_of_llama_cpp_offloads_with_cuda(installed: set[str]) -> None:
    installed.add("llama_cpp")
    probe = {"version": "0.3.36", "gpu_offload": True, "system_info": CUDA_SYSTEM_INFO}
    availability = llamacpp_availability(probe, None)
    assert availability.available and availability.gpu_offload
    assert availability.reason == "llama-cpp-python 9.9.9, with CUDA"
    assert availability.version == "0.3.36"


def test_llama_cpp_that_does_not_load_is_unavailable_with_the_error(installed: set[str]) -> None:
    installed.add("llama_cpp")
    availability = llamacpp_availability({"error": "OSError: libcuda.so.1: cannot open shared object file"}, None)
    assert not availability.available
    assert "libcuda.so.1" in availability.reason


def test_llama_cpp_whose_probe_timed_out_stays_available_without_gpu_offload(installed: set[str]) -> None:
    installed.add("llama_cpp")
    availability = llamacpp_availability(None, "the llamacpp probe gave no answer: python did not answer within 1 s")
    assert availability.available and not availability.gpu_offload
    assert "did not answer" in availability.reason


def test_missing_llama_cpp_is_not_installed(installed: set[str]) -> None:
    availability = llamacpp_availability(None, None)
    assert not availability.available and "not installed" in availability.reason


def test_onnx_needs_onnxruntime_genai(installed: set[str]) -> None:
    installed.add("onnxruntime")
    assert "onnxruntime-genai is not installed" in onnx_availability({"providers": []}, None).reason
    installed.add("onnxruntime_genai")
    probe = {"onnxruntime": "1.31.1", "genai": "0.18.0", "providers": ["CPUExecutionProvider"]}
    availability = onnx_availability(probe, None)
    assert availability.available and availability.version == "0.18.0"
    assert availability.reason == "onnxruntime-genai 0.18.0 on onnxruntime 1.31.1"


def test_onnxruntime_genai_that_does_not_import_is_unavailable(installed: set[str]) -> None:
    installed.update({"onnxruntime", "onnxruntime_genai"})
    probe = {"onnxruntime": "1.31.1", "providers": [], "genai_error": "ImportError: DLL load failed"}
    availability = onnx_availability(probe, None)
    assert not availability.available and "DLL load failed" in availability.reason


def test_vllm_needs_linux_and_a_cuda_gpu_of_compute_capability_7(installed: set[str]) -> None:
    assert vllm_availability("linux", [h100()]).reason.startswith("vllm is not installed")
    installed.add("vllm")
    assert vllm_availability("linux", [h100()]).available
    assert "Linux only" in vllm_availability("darwin", [h100()]).reason
    assert not vllm_availability("linux", []).available
    assert not vllm_availability("linux", [h100(cc=(6, 1))]).available


def test_vllm_is_looked_up_without_being_imported() -> None:
    vllm_availability("linux", [h100()])
    assert "vllm" not in sys.modules
