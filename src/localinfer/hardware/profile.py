"""The hardware profile: what detection finds and what the planner reads. Plain frozen data, so a profile can be
recorded, loaded from JSON and written by hand in tests."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

OS = Literal["linux", "darwin", "windows", "other"]
GPUVendor = Literal["nvidia", "amd", "apple", "intel", "other"]
GPUApi = Literal["cuda", "rocm", "metal", "directml", "vulkan", "none"]

GiB = 1 << 30


@dataclass(frozen=True)
class CPUInfo:
    model: str
    arch: str  # "x86_64", "arm64", ...
    physical_cores: int
    logical_cores: int
    features: tuple[str, ...] = ()  # lower-case SIMD flags that matter for inference: avx2, avx512f, amx_tile, neon


@dataclass(frozen=True)
class MemoryInfo:
    total: int  # bytes, already capped by a cgroup limit when there is one
    available: int  # bytes
    cgroup_limit: int | None = None  # the container's limit when it is below the machine's RAM


@dataclass(frozen=True)
class GPUInfo:
    vendor: GPUVendor
    name: str
    index: int
    memory_total: int  # bytes; for unified memory, what the GPU may use
    memory_free: int | None = None  # bytes; None when the probe cannot tell
    compute_capability: tuple[int, int] | None = None  # NVIDIA only
    driver: str | None = None
    api: GPUApi = "none"  # how the backends reach it
    unified_memory: bool = False  # Apple Silicon, Jetson: the GPU shares the RAM
    source: str = ""  # the probe that found it: nvml, nvidia-smi, sysfs, system_profiler, onnxruntime, ...


@dataclass(frozen=True)
class BackendAvailability:
    name: str  # "llamacpp", "onnx", "vllm"
    available: bool
    reason: str  # why (not): "llama-cpp-python 0.3.36 with CUDA", "vllm is not installed", ...
    version: str | None = None
    gpu_offload: bool = False  # llama.cpp built with a GPU backend (CUDA, Metal, ROCm, Vulkan)
    gpu_backends: tuple[str, ...] = ()  # which, as llama.cpp names them ("CUDA", "Vulkan"); () when not known


@dataclass(frozen=True)
class HardwareProfile:
    os: OS
    os_version: str
    cpu: CPUInfo
    memory: MemoryInfo
    gpus: tuple[GPUInfo, ...] = ()
    backends: tuple[BackendAvailability, ...] = ()
    onnx_providers: tuple[str, ...] = ()  # ONNX Runtime's execution providers, best first as ORT lists them
    notes: tuple[str, ...] = field(default=())  # what a probe could not tell, in a sentence each

    def backend(self, name: str) -> BackendAvailability:
        """The availability of backend ``name`` (unavailable with a reason when detection did not look)."""
        found = next((b for b in self.backends if b.name == name), None)
        return found or BackendAvailability(name, False, f"{name} was not probed")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HardwareProfile:
        def gpu(g: dict[str, Any]) -> GPUInfo:
            cc = g.get("compute_capability")
            return GPUInfo(**{**g, "compute_capability": tuple(cc) if cc else None})

        return cls(
            os=data["os"],
            os_version=data["os_version"],
            cpu=CPUInfo(**{**data["cpu"], "features": tuple(data["cpu"].get("features", ()))}),
            memory=MemoryInfo(**data["memory"]),
            gpus=tuple(gpu(g) for g in data.get("gpus", ())),
            backends=tuple(
                BackendAvailability(**{**b, "gpu_backends": tuple(b.get("gpu_backends", ()))})
                for b in data.get("backends", ())
            ),
            onnx_providers=tuple(data.get("onnx_providers", ())),
            notes=tuple(data.get("notes", ())),
        )
