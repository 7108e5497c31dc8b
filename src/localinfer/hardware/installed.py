"""Which inference engines are installed and usable here. Packages are looked up without importing them
(``find_spec``, ``importlib.metadata``); what needs an import comes from the library probes' JSON."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localinfer.hardware.profile import OS, BackendAvailability, GPUInfo

# llama.cpp's system info names its backends ("CUDA : ARCHS = 890 | … | CPU : SSE3 = 1 | …"); these drive a GPU.
_LLAMA_GPU_BACKENDS = ("CUDA", "ROCm", "HIP", "Metal", "MTL", "Vulkan", "SYCL", "MUSA", "CANN", "OpenCL", "Kompute")
VLLM_MIN_COMPUTE = (7, 0)


@dataclass(frozen=True)
class EngineInstall:
    """How an engine run as a child process is found here and what it needs: a Python ``module`` found without
    importing it (its ``distribution`` names the version), else a ``program`` on PATH; ``how`` to get it."""

    name: str
    title: str
    how: str
    module: str | None = None
    distribution: str | None = None
    program: str | None = None
    min_compute: tuple[int, int] = VLLM_MIN_COMPUTE


# The engines as their own docs state them (each recipe in backends/engine_process/recipes/ starts one).
ENGINE_INSTALLS: tuple[EngineInstall, ...] = (
    EngineInstall(
        "vllm", "vLLM", "pip install 'localinfer[vllm]', on Linux with a CUDA GPU", "vllm", "vllm", None, (7, 0)
    ),
    EngineInstall(
        "sglang",
        "SGLang",
        "pip install 'localinfer[sglang]', on Linux with a CUDA GPU",
        "sglang",
        "sglang",
        None,
        (7, 5),
    ),
    EngineInstall(
        "tgi",
        "TGI",
        "run TGI's container (ghcr.io/huggingface/text-generation-inference) or build it, with "
        "text-generation-launcher on PATH",
        program="text-generation-launcher",
        min_compute=(8, 0),
    ),
    EngineInstall(
        "trtllm",
        "TensorRT-LLM",
        "pip install tensorrt-llm --extra-index-url https://pypi.nvidia.com, or NVIDIA's TensorRT-LLM container, "
        "with trtllm-serve on PATH",
        program="trtllm-serve",
        min_compute=(8, 0),
    ),
)
ENGINE_NAMES = tuple(e.name for e in ENGINE_INSTALLS)


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_version(*distributions: str) -> str | None:
    """The version of the first of ``distributions`` that is installed, else None."""
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def llama_gpu_backends(system_info: str, registries: Sequence[str] = ()) -> list[str]:
    """The GPU backends named in ``llama_print_system_info()``'s line, in its order, then those among ggml's
    backend ``registries`` that it leaves out (Vulkan names no features, so the line does not name it)."""
    names = [part.split(" : ", 1)[0].strip() for part in system_info.split("|") if " : " in part]
    names += [name for name in registries if name not in names]
    return [name for name in names if name in _LLAMA_GPU_BACKENDS]


def llamacpp_availability(probe: Mapping[str, Any] | None, error: str | None) -> BackendAvailability:
    """llama-cpp-python from the ``llamacpp`` probe's result; ``error`` says why the probe gave none."""
    if not is_installed("llama_cpp"):
        return BackendAvailability(
            "llamacpp", False, "llama-cpp-python is not installed (pip install llama-cpp-python)"
        )
    version = installed_version("llama_cpp_python", "llama-cpp-python")
    label = f"llama-cpp-python {version}" if version else "llama-cpp-python"
    if probe is None:
        return BackendAvailability("llamacpp", True, f"{label}; GPU offload unknown ({error})", version)
    if "error" in probe:
        return BackendAvailability(
            "llamacpp", False, f"{label} is installed but does not load: {probe['error']}", version
        )
    gpus = llama_gpu_backends(str(probe.get("system_info") or ""), [str(r) for r in probe.get("registries") or ()])
    rpc = bool(probe.get("rpc"))
    # llama.cpp says it can offload when it has the RPC backend alone: that is no GPU here
    offload = bool(probe.get("gpu_offload")) and (bool(gpus) or not rpc)
    where = f"with {', '.join(gpus)}" if offload and gpus else "with GPU offload" if offload else "CPU only"
    if rpc:
        where += ", RPC workers (serve --rpc)"
    if probe.get("cpu_variant"):  # the packaged app: one of llama.cpp's CPU builds, the best this CPU runs
        where += f", CPU variant {probe['cpu_variant']}"
    return BackendAvailability(
        "llamacpp", True, f"{label}, {where}", str(probe.get("version") or version), offload, tuple(gpus)
    )


def onnx_availability(probe: Mapping[str, Any] | None, error: str | None) -> BackendAvailability:
    """onnxruntime-genai (and the ONNX Runtime under it) from the ``onnx`` probe's result."""
    if not is_installed("onnxruntime_genai"):
        why = "onnxruntime-genai is not installed (pip install onnxruntime-genai)"
        return BackendAvailability("onnx", False, why)
    version = installed_version("onnxruntime-genai", "onnxruntime-genai-cuda", "onnxruntime-genai-directml")
    if probe is None:
        return BackendAvailability("onnx", False, f"onnxruntime-genai could not be checked: {error}", version)
    if "error" in probe:
        return BackendAvailability("onnx", False, f"onnxruntime does not load: {probe['error']}", version)
    if "genai" not in probe:
        why = f"onnxruntime-genai is installed but does not load: {probe.get('genai_error', 'unknown error')}"
        return BackendAvailability("onnx", False, why, version)
    genai = str(probe["genai"])
    return BackendAvailability(
        "onnx", True, f"onnxruntime-genai {genai} on onnxruntime {probe.get('onnxruntime')}", genai
    )


def vllm_availability(system: OS, gpus: Sequence[GPUInfo]) -> BackendAvailability:
    """vLLM, looked up without importing it (a heavy import): it needs Linux and an NVIDIA GPU of compute
    capability 7.0 or more. Whether a model is worth running on it is the planner's call."""
    return engine_availability(ENGINE_INSTALLS[0], system, gpus)


def engine_availability(
    engine: EngineInstall, system: OS, gpus: Sequence[GPUInfo], path: str | None = None
) -> BackendAvailability:
    """Whether ``engine`` is installed (its module, without importing it, or its program on ``path``, None: this
    process's PATH) and usable here: Linux and an NVIDIA GPU of its compute capability; why not, and how to get it."""
    name, label, version = engine.name, engine.module or engine.program or engine.name, None
    if engine.module is not None:
        found = is_installed(engine.module)
        version = installed_version(engine.distribution or engine.module) if found else None
        label = f"{engine.module} {version}" if version else engine.module
    else:
        found = shutil.which(engine.program or engine.name, path=path) is not None
    if not found:
        return BackendAvailability(name, False, f"{label} is not installed ({engine.how})")
    if system != "linux":
        return BackendAvailability(name, False, f"{label} is installed but runs on Linux only", version)
    need = engine.min_compute
    cuda = [g for g in gpus if g.api == "cuda" and (g.compute_capability or (0, 0)) >= need]
    if not cuda:
        why = f"{label} is installed but needs an NVIDIA GPU with compute capability {need[0]}.{need[1]} or more"
        if any(g.api == "cuda" for g in gpus):
            best = max(g.compute_capability or (0, 0) for g in gpus if g.api == "cuda")
            why += f" (the best here has {best[0]}.{best[1]})"
        return BackendAvailability(name, False, why, version)
    return BackendAvailability(name, True, f"{label}, {len(cuda)} CUDA GPU(s) it can use", version)


def engine_availabilities(system: OS, gpus: Sequence[GPUInfo], path: str | None = None) -> list[BackendAvailability]:
    """Every engine run as a child process (vLLM, SGLang, TGI, TensorRT-LLM), in that order."""
    return [engine_availability(e, system, gpus, path) for e in ENGINE_INSTALLS]
