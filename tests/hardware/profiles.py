"""Hardware profiles and model profiles for the planner's table: machines people run local models on."""

from __future__ import annotations

from localinfer.hardware.model_profile import ModelProfile
from localinfer.hardware.profile import (
    BackendAvailability,
    CPUInfo,
    GiB,
    GPUInfo,
    HardwareProfile,
    MemoryInfo,
)

GB = 1_000_000_000
X86 = ("avx", "avx2", "fma", "f16c")
LLAMA_CPU = BackendAvailability("llamacpp", True, "llama-cpp-python 0.3.36, CPU only", "0.3.36")
LLAMA_GPU = BackendAvailability("llamacpp", True, "llama-cpp-python 0.3.36 with GPU offload", "0.3.36", True)
NO_ONNX = BackendAvailability("onnx", False, "onnxruntime-genai is not installed")
ONNX = BackendAvailability("onnx", True, "onnxruntime-genai 0.18.0", "0.18.0")
NO_VLLM = BackendAvailability("vllm", False, "vllm is not installed")
VLLM = BackendAvailability("vllm", True, "vllm 0.33.0", "0.33.0")


def linux(
    cores: int,
    ram_gib: float,
    free_gib: float,
    *gpus: GPUInfo,
    backends: tuple[BackendAvailability, ...] = (),
    providers: tuple[str, ...] = ("CPUExecutionProvider",),
    arch: str = "x86_64",
) -> HardwareProfile:
    return HardwareProfile(
        os="linux",
        os_version="6.8",
        cpu=CPUInfo("test cpu", arch, cores, cores * 2, X86 if arch == "x86_64" else ("neon", "dotprod")),
        memory=MemoryInfo(int(ram_gib * GiB), int(free_gib * GiB)),
        gpus=gpus,
        backends=backends or (LLAMA_GPU if gpus else LLAMA_CPU, NO_ONNX, NO_VLLM),
        onnx_providers=providers,
    )


def nvidia(name: str, total_gib: float, free_gib: float, cc: tuple[int, int], index: int = 0) -> GPUInfo:
    return GPUInfo(
        "nvidia", name, index, int(total_gib * GiB), int(free_gib * GiB), cc, "560.35", "cuda", False, "nvml"
    )


HARDWARE: dict[str, HardwareProfile] = {
    "laptop without GPU": linux(8, 16, 10),
    "8 GB RAM machine": linux(4, 8, 5),
    "RTX 3060 12 GB": linux(6, 32, 24, nvidia("NVIDIA GeForce RTX 3060", 12, 11.5, (8, 6))),
    "RTX 4090 24 GB": linux(16, 64, 50, nvidia("NVIDIA GeForce RTX 4090", 24, 23.5, (8, 9))),
    "two RTX 4060 Ti 16 GB": linux(
        8,
        64,
        50,
        nvidia("NVIDIA GeForce RTX 4060 Ti", 16, 15.5, (8, 9), 0),
        nvidia("NVIDIA GeForce RTX 4060 Ti", 16, 15.5, (8, 9), 1),
    ),
    "Apple M2 16 GB": HardwareProfile(
        os="darwin",
        os_version="14.5",
        cpu=CPUInfo("Apple M2", "arm64", 8, 8, ("neon", "dotprod")),
        memory=MemoryInfo(16 * GiB, 9 * GiB),
        gpus=(GPUInfo("apple", "Apple M2", 0, int(10.7 * GiB), None, None, None, "metal", True, "system_profiler"),),
        backends=(LLAMA_GPU, ONNX, NO_VLLM),
        onnx_providers=("CoreMLExecutionProvider", "CPUExecutionProvider"),
    ),
    "Apple M3 Max 64 GB": HardwareProfile(
        os="darwin",
        os_version="15.1",
        cpu=CPUInfo("Apple M3 Max", "arm64", 16, 16, ("neon", "dotprod", "i8mm")),
        memory=MemoryInfo(64 * GiB, 48 * GiB),
        gpus=(GPUInfo("apple", "Apple M3 Max", 0, 48 * GiB, None, None, None, "metal", True, "system_profiler"),),
        backends=(LLAMA_GPU, ONNX, NO_VLLM),
        onnx_providers=("CoreMLExecutionProvider", "CPUExecutionProvider"),
    ),
    "Windows, AMD GPU with DirectML": HardwareProfile(
        os="windows",
        os_version="10.0.22631",
        cpu=CPUInfo("AMD Ryzen 7 7700X", "x86_64", 8, 16, (*X86, "avx512f")),
        memory=MemoryInfo(32 * GiB, 20 * GiB),
        gpus=(
            GPUInfo("amd", "AMD Radeon RX 7800 XT", 0, 16 * GiB, None, None, None, "directml", False, "onnxruntime"),
        ),
        backends=(LLAMA_CPU, ONNX, NO_VLLM),
        onnx_providers=("DmlExecutionProvider", "CPUExecutionProvider"),
    ),
    "A100 40 GB": linux(
        32,
        256,
        200,
        nvidia("NVIDIA A100-SXM4-40GB", 40, 39.4, (8, 0)),
        backends=(LLAMA_GPU, ONNX, VLLM),
        providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
    ),
    "H100 80 GB with vLLM": linux(
        32,
        512,
        400,
        nvidia("NVIDIA H100 80GB HBM3", 80, 79.2, (9, 0)),
        backends=(LLAMA_GPU, ONNX, VLLM),
        providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
    ),
    "H100 80 GB without vLLM": linux(
        32,
        512,
        400,
        nvidia("NVIDIA H100 80GB HBM3", 80, 79.2, (9, 0)),
        backends=(LLAMA_GPU, ONNX, NO_VLLM),
        providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
    ),
    "4x A100 80 GB with vLLM": linux(
        64,
        1024,
        900,
        *(nvidia("NVIDIA A100-SXM4-80GB", 80, 79.1, (8, 0), i) for i in range(4)),
        backends=(LLAMA_GPU, ONNX, VLLM),
        providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
    ),
    "Jetson Orin Nano 8 GB": linux(
        6,
        7.4,
        5.5,
        GPUInfo("nvidia", "Orin (nvgpu)", 0, int(7.4 * GiB), int(5.5 * GiB), (8, 7), "36.3", "cuda", True, "tegra"),
        arch="arm64",
    ),
}

MODELS: dict[str, ModelProfile] = {
    # SmolLM2-135M-Instruct Q4_1: 30 layers, 3 KV heads of 64.
    "SmolLM2 135M Q4_1": ModelProfile("smollm2", "gguf", 98_362_432, 30, 8192, 30 * 3 * 128 * 2, "Q4_1"),
    # Llama 3.1 8B Instruct Q4_K_M: 32 layers, 8 KV heads of 128, trained for 128k tokens.
    "Llama 3.1 8B Q4_K_M": ModelProfile("llama3.1:8b", "gguf", int(4.92 * GB), 32, 131072, 32 * 8 * 256 * 2, "Q4_K_M"),
    # Llama 3.3 70B Instruct Q4_K_M: 80 layers, 8 KV heads of 128.
    "Llama 3.3 70B Q4_K_M": ModelProfile(
        "llama3.3:70b", "gguf", int(42.5 * GB), 80, 131072, 80 * 8 * 256 * 2, "Q4_K_M"
    ),
    # Qwen2.5 1.5B Instruct, onnxruntime-genai int4: 28 layers, 2 KV heads of 128.
    "Qwen2.5 1.5B ONNX int4": ModelProfile("qwen2.5-1.5b-onnx", "onnx", int(1.6 * GB), 28, 32768, 28 * 2 * 256 * 2),
    # Llama 3.1 8B Instruct in safetensors (bf16).
    "Llama 3.1 8B safetensors": ModelProfile("llama3.1-8b-hf", "hf", int(16.1 * GB), 32, 131072, 32 * 8 * 256 * 2),
    # Llama 3.3 70B Instruct in safetensors (bf16): 141 GB.
    "Llama 3.3 70B safetensors": ModelProfile("llama3.3-70b-hf", "hf", int(141 * GB), 80, 131072, 80 * 8 * 256 * 2),
}
