"""The planner's macOS and Windows paths from what those platforms' probes return, through ``detect()`` as it
runs there: ``platform.system()`` says Darwin or Windows, ``sysctl`` prints a Mac's values, the library probes
print what llama-cpp-python and ONNX Runtime answer on those machines (a Metal build; onnxruntime-directml's
adapters), ``nvidia-smi`` prints a Windows driver's table. Each row is one machine: the GPUs ``detect`` finds,
then the plan ``serve`` makes for a model there (device, layers on the GPU) and why.

Recorded outputs: ``data/sysctl_macos_m2pro.txt`` (``sysctl`` on an M2 Pro MacBook Pro with 32 GB), the probes'
answers below as those libraries give them (llama.cpp's system info line of its macOS Metal release; ONNX Runtime
1.22's ``get_ep_devices()`` on Windows 11 with an AMD Radeon RX 7600 and with an NVIDIA GeForce RTX 4070).
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from localinfer.hardware import detect as detection
from localinfer.hardware import memory
from localinfer.hardware.plan import plan
from localinfer.hardware.probes import PROBE_MARKER
from localinfer.hardware.profile import GiB, HardwareProfile, MemoryInfo
from tests.hardware.data import DATA
from tests.hardware.profiles import MODELS

METAL_BUILD = {
    "version": "0.3.36",
    "gpu_offload": True,
    "rpc": True,
    "system_info": "Metal : EMBED_LIBRARY = 1 | CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | DOTPROD = 1 | "
    "MATMUL_INT8 = 1 | ACCELERATE = 1 | REPACK = 1 |",
    "cpu_variant": None,
}
CPU_BUILD: dict[str, Any] = {
    "version": "0.3.36",
    "gpu_offload": True,  # llama.cpp says so with the RPC backend alone
    "rpc": True,
    "system_info": "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | OPENMP = 1 | REPACK = 1 |",
    "cpu_variant": "haswell",
}
# llama.cpp's Windows Vulkan release: the Vulkan backend lists no features, so only ggml's registries name it.
VULKAN_BUILD: dict[str, Any] = {**CPU_BUILD, "registries": ["Vulkan", "RPC", "CPU"]}
COREML = {
    "onnxruntime": "1.22.1",
    "providers": ["CoreMLExecutionProvider", "AzureExecutionProvider", "CPUExecutionProvider"],
    "devices": [],
    "genai": "0.8.3",
}


def dml_adapter(vendor: str, vendor_id: int, description: str, memory_mb: int) -> dict[str, Any]:
    """One adapter as ONNX Runtime 1.22's ``get_ep_devices()`` describes it (the ``onnx`` probe's ``devices``)."""
    metadata = {"DxgiAdapterNumber": "0", "DxgiVideoMemory": f"{memory_mb} MB", "Description": description}
    return {"ep": "DmlExecutionProvider", "type": "GPU", "vendor": vendor, "vendor_id": vendor_id, "device_id": 0,
            "metadata": metadata}  # fmt: skip


def directml(*adapters: dict[str, Any], onnxruntime: str = "1.22.1") -> dict[str, Any]:
    cpu = {"ep": "CPUExecutionProvider", "type": "CPU", "vendor": "AMD", "vendor_id": 4098, "device_id": 0,
           "metadata": {}}  # fmt: skip
    return {
        "onnxruntime": onnxruntime,
        "providers": ["DmlExecutionProvider", "CPUExecutionProvider"],
        "devices": [*adapters, cpu] if adapters else [],
        "genai": "0.8.3",
    }


RX_7600 = dml_adapter("AMD", 0x1002, "AMD Radeon RX 7600", 8176)
RTX_4070 = dml_adapter("NVIDIA", 0x10DE, "NVIDIA GeForce RTX 4070", 12010)
# nvidia-smi.exe --query-gpu=index,name,memory.total,memory.free,compute_cap,driver_version,uuid on Windows 11.
RTX_4070_SMI = "0, NVIDIA GeForce RTX 4070, 12282, 11050, 8.9, 566.36, GPU-5f2c8a1e-3b7d-4c2e-9f61-0d8e2a7b4c19\n"


@dataclass(frozen=True)
class Machine:
    system: str  # what platform.system() says there
    ram: MemoryInfo
    probes: dict[str, dict[str, Any]]
    sysctl: str | None = None  # sysctl's output there
    nvidia_smi: str | None = None  # nvidia-smi's output there
    notes: tuple[str, ...] = field(default=())


M2_PRO = (DATA / "sysctl_macos_m2pro.txt").read_text()
MACHINES = {
    "MacBook Pro M2 Pro 32 GB, Metal build": Machine(
        "Darwin", MemoryInfo(32 * GiB, 20 * GiB), {"llamacpp": METAL_BUILD, "onnx": COREML}, sysctl=M2_PRO
    ),
    # sudo sysctl iogpu.wired_limit_mb=28672: the GPU may take 28 GiB instead of two thirds of the RAM.
    "MacBook Pro M2 Pro 32 GB, wired limit raised": Machine(
        "Darwin",
        MemoryInfo(32 * GiB, 30 * GiB),
        {"llamacpp": METAL_BUILD, "onnx": COREML},
        sysctl=M2_PRO.replace("iogpu.wired_limit_mb: 0", "iogpu.wired_limit_mb: 28672"),
    ),
    "Windows desktop, Radeon RX 7600, onnxruntime-directml": Machine(
        "Windows", MemoryInfo(32 * GiB, 24 * GiB), {"llamacpp": CPU_BUILD, "onnx": directml(RX_7600)}
    ),
    "Windows desktop, Radeon, onnxruntime-directml 1.21": Machine(
        "Windows",
        MemoryInfo(32 * GiB, 24 * GiB),
        {"llamacpp": CPU_BUILD, "onnx": directml(onnxruntime="1.21.0")},
        notes=("DirectML is available but ONNX Runtime (before 1.22) cannot list its adapters.",),
    ),
    "Windows laptop, GeForce RTX 4070, CUDA build": Machine(
        "Windows",
        MemoryInfo(32 * GiB, 22 * GiB),
        {
            "llamacpp": {**CPU_BUILD, "system_info": "CUDA : ARCHS = 890 | " + CPU_BUILD["system_info"]},
            "onnx": directml(RTX_4070),
            "nvml": {"error": "NVML Shared Library Not Found"},
        },
        nvidia_smi=RTX_4070_SMI,
    ),
    "Windows desktop, Radeon RX 7600, Vulkan build": Machine(
        "Windows", MemoryInfo(32 * GiB, 24 * GiB), {"llamacpp": VULKAN_BUILD, "onnx": directml(RX_7600)}
    ),
    "Windows laptop, GeForce RTX 4070, Vulkan build": Machine(
        "Windows",
        MemoryInfo(32 * GiB, 22 * GiB),
        {
            "llamacpp": VULKAN_BUILD,
            "onnx": directml(RTX_4070),
            "nvml": {"error": "NVML Shared Library Not Found"},
        },
        nvidia_smi=RTX_4070_SMI,
    ),
}


def printing(answers: dict[str, dict[str, Any]]) -> Any:
    """A probe command that prints the recorded answer as the probe would, in a child process as detect runs it."""

    def command(name: str) -> Sequence[str]:
        answer = answers.get(name, {"error": f"no {name} on this machine"})
        return [sys.executable, "-c", f"print({PROBE_MARKER + json.dumps(answer)!r})"]

    return command


def script(path: Path, output: str) -> Path:
    (path.parent / f"{path.name}.out").write_text(output)
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(path) + '.out'!r}).read())\n")
    path.chmod(0o755)
    return path


def detect_on(machine: Machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HardwareProfile:
    monkeypatch.setattr(platform, "system", lambda: machine.system)
    monkeypatch.setattr(platform, "machine", lambda: {"Darwin": "arm64", "Windows": "AMD64"}[machine.system])
    monkeypatch.setattr(memory, "detect_memory", lambda root=None: (machine.ram, []))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sysctl = script(bin_dir / "sysctl", machine.sysctl or "")
    monkeypatch.setattr(detection, "_sysctl_path", lambda: str(sysctl))
    if machine.nvidia_smi is not None:
        script(bin_dir / "nvidia-smi", machine.nvidia_smi)
    return detection.detect(environ={"PATH": str(bin_dir)}, probe_command=printing(machine.probes))


# (machine, model, GPUs found as (api, name, GiB usable), device, GPU layers, words of the plan's reasons)
ROWS = [
    # Two thirds of 32 GiB is Metal's recommended working set; the 8B file and its cache fit in it.
    ("MacBook Pro M2 Pro 32 GB, Metal build", "Llama 3.1 8B Q4_K_M", [("metal", "Apple M2 Pro", 21.33)], "metal", 33,
     "all 33 layers on Apple M2 Pro"),
    ("MacBook Pro M2 Pro 32 GB, Metal build", "Llama 3.3 70B Q4_K_M", [("metal", "Apple M2 Pro", 21.33)], "metal", 35,
     "35 of 81 layers on Apple M2 Pro"),
    ("MacBook Pro M2 Pro 32 GB, wired limit raised", "Llama 3.3 70B Q4_K_M", [("metal", "Apple M2 Pro", 28.0)],
     "metal", 50, "50 of 81 layers on Apple M2 Pro"),
    ("MacBook Pro M2 Pro 32 GB, Metal build", "Qwen2.5 1.5B ONNX int4", [("metal", "Apple M2 Pro", 21.33)], "apple",
     0, "ONNX Runtime on Apple's Neural Engine and GPU through CoreML"),
    ("Windows desktop, Radeon RX 7600, onnxruntime-directml", "Qwen2.5 1.5B ONNX int4",
     [("directml", "AMD Radeon RX 7600", 7.98)], "directml", 0, "ONNX Runtime on the GPU through DirectML"),
    # llama.cpp's CPU release cannot use a GPU DirectML found: every layer on the CPU, and it says why.
    ("Windows desktop, Radeon RX 7600, onnxruntime-directml", "Llama 3.1 8B Q4_K_M",
     [("directml", "AMD Radeon RX 7600", 7.98)], "cpu", 0, "built without GPU support"),
    # Before ONNX Runtime 1.22 the adapters are not listed: no GPU is known, so DirectML is not chosen.
    ("Windows desktop, Radeon, onnxruntime-directml 1.21", "Qwen2.5 1.5B ONNX int4", [], "cpu", 0,
     "ONNX Runtime on the CPU"),
    # nvidia-smi finds the GeForce; DirectML's description of the same card is not counted twice.
    ("Windows laptop, GeForce RTX 4070, CUDA build", "Llama 3.1 8B Q4_K_M",
     [("cuda", "NVIDIA GeForce RTX 4070", 11.99)], "cuda:0", 33, "all 33 layers on NVIDIA"),
    ("Windows laptop, GeForce RTX 4070, CUDA build", "Qwen2.5 1.5B ONNX int4",
     [("cuda", "NVIDIA GeForce RTX 4070", 11.99)], "cpu", 0, "ONNX Runtime on the CPU"),
    # llama.cpp's Vulkan release drives the Radeon that DirectML found, and the GeForce that nvidia-smi found, as
    # Vulkan0 (a CUDA build could reach neither the Radeon nor, named so, the GeForce through Vulkan).
    ("Windows desktop, Radeon RX 7600, Vulkan build", "Llama 3.1 8B Q4_K_M",
     [("directml", "AMD Radeon RX 7600", 7.98)], "vulkan:0", 23, "23 of 33 layers on AMD Radeon RX 7600"),
    ("Windows laptop, GeForce RTX 4070, Vulkan build", "Llama 3.1 8B Q4_K_M",
     [("cuda", "NVIDIA GeForce RTX 4070", 11.99)], "vulkan:0", 33, "all 33 layers on NVIDIA GeForce RTX 4070"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("machine", "model", "gpus", "device", "gpu_layers", "why"), ROWS, ids=[f"{r[0]} / {r[1]}" for r in ROWS]
)
def test_the_plan_from_what_macos_and_windows_probes_return(
    machine: str,
    model: str,
    gpus: list[tuple[str, str, float]],
    device: str,
    gpu_layers: int,
    why: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hw = detect_on(MACHINES[machine], tmp_path, monkeypatch)
    found: list[tuple[str, str, float]] = [(g.api, g.name, round(g.memory_total / GiB, 2)) for g in hw.gpus]
    assert found == gpus
    for note in MACHINES[machine].notes:
        assert note in hw.notes
    chosen = plan(hw, MODELS[model])
    assert (chosen.device, chosen.gpu_layers) == (device, gpu_layers), chosen.reasons
    assert any(why in reason for reason in chosen.reasons), chosen.reasons


def test_a_vulkan_build_says_so_though_its_system_info_names_no_vulkan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = detect_on(MACHINES["Windows desktop, Radeon RX 7600, Vulkan build"], tmp_path, monkeypatch)
    llama = hw.backend("llamacpp")
    assert llama.gpu_offload and llama.gpu_backends == ("Vulkan",)
    assert "with Vulkan" in llama.reason
