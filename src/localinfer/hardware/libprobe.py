"""Library probes, run in a child process (``python -m localinfer.hardware.libprobe NAME``): each imports an
optional library, asks it what it sees and prints one result line, ``LOCALINFER_PROBE {json}``.

Initialising GPU libraries can print to the terminal, hang or crash; here that costs a child process only.
A library that raises is reported as ``{"error": "..."}``.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from localinfer.hardware.probes import PROBE_MARKER

CPU_VARIANT_LOADED_ENV = "LOCALINFER_CPU_VARIANT_LOADED"  # set by backends.llamacpp.cpu_variants.load


def probe_nvml() -> dict[str, Any]:
    """The driver version and, per GPU in NVML's (PCI) order: name, UUID, memory and compute capability."""
    nv = importlib.import_module("pynvml")
    nv.nvmlInit()
    try:
        gpus: list[dict[str, Any]] = []
        for index in range(nv.nvmlDeviceGetCount()):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            gpu: dict[str, Any] = {
                "index": index,
                "name": _text(nv.nvmlDeviceGetName(handle)),
                "uuid": _text(nv.nvmlDeviceGetUUID(handle)),
            }
            try:
                memory = nv.nvmlDeviceGetMemoryInfo(handle)
                gpu.update(memory_total=int(memory.total), memory_free=int(memory.free))
            except Exception as exc:  # NVML says NotSupported for unified-memory GPUs (GB10)
                gpu["memory_error"] = str(exc)
            try:
                gpu["compute_capability"] = list(nv.nvmlDeviceGetCudaComputeCapability(handle))
            except Exception as exc:
                gpu["compute_capability_error"] = str(exc)
            gpus.append(gpu)
        return {"driver": _text(nv.nvmlSystemGetDriverVersion()), "gpus": gpus}
    finally:
        nv.nvmlShutdown()


def probe_llamacpp() -> dict[str, Any]:
    """llama-cpp-python's version, whether it can offload to a GPU (or RPC workers) and has the RPC backend,
    llama.cpp's system info line and, in the packaged app, which of its CPU variants was loaded
    (``backends.llamacpp.cpu_variants``)."""
    llama_cpp = importlib.import_module("llama_cpp")
    info = llama_cpp.llama_print_system_info()
    return {
        "version": str(getattr(llama_cpp, "__version__", "")) or None,
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),  # true with the RPC backend alone
        "rpc": bool(llama_cpp.llama_supports_rpc()),
        "system_info": _text(info),
        "registries": _backend_registries(),
        "cpu_variant": os.environ.get(CPU_VARIANT_LOADED_ENV),
    }


def _backend_registries() -> list[str]:
    """The names of ggml's backend registries in this llama.cpp (CPU, CUDA, Vulkan, MTL, RPC...): the system info
    line names only those that list features, and Vulkan lists none. Read through libllama's handle, which reaches
    libggml's functions; [] where it does not."""
    lib: Any = getattr(importlib.import_module("llama_cpp.llama_cpp"), "_lib", None)
    try:
        count, get, name = lib.ggml_backend_reg_count, lib.ggml_backend_reg_get, lib.ggml_backend_reg_name
    except AttributeError:
        return []
    count.restype = ctypes.c_size_t
    get.argtypes, get.restype = [ctypes.c_size_t], ctypes.c_void_p
    name.argtypes, name.restype = [ctypes.c_void_p], ctypes.c_char_p
    return [(name(get(i)) or b"").decode() for i in range(count())]


def probe_onnx() -> dict[str, Any]:
    """ONNX Runtime's version, execution providers and devices, and whether onnxruntime-genai imports."""
    ort = importlib.import_module("onnxruntime")
    result: dict[str, Any] = {
        "onnxruntime": str(getattr(ort, "__version__", "")) or None,
        "providers": [str(p) for p in ort.get_available_providers()],
        "devices": [],
    }
    if hasattr(ort, "get_ep_devices"):  # onnxruntime >= 1.22
        try:
            result["devices"] = [_ep_device(d) for d in ort.get_ep_devices()]
        except Exception as exc:
            result["devices_error"] = str(exc)
    try:
        genai = importlib.import_module("onnxruntime_genai")
        result["genai"] = str(getattr(genai, "__version__", "")) or "unknown"
    except Exception as exc:
        result["genai_error"] = f"{type(exc).__name__}: {exc}"
    return result


PROBES: dict[str, Callable[[], dict[str, Any]]] = {
    "nvml": probe_nvml,
    "llamacpp": probe_llamacpp,
    "onnx": probe_onnx,
}


def _ep_device(device: Any) -> dict[str, Any]:
    hardware = device.device
    kind = getattr(hardware, "type", "")
    return {
        "ep": str(device.ep_name),
        "type": str(getattr(kind, "name", kind)).rsplit(".", 1)[-1],
        "vendor": str(getattr(hardware, "vendor", "")),
        "vendor_id": int(getattr(hardware, "vendor_id", 0)),
        "device_id": int(getattr(hardware, "device_id", 0)),
        "metadata": {str(k): str(v) for k, v in dict(getattr(hardware, "metadata", {}) or {}).items()},
    }


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PROBES:
        print(f"usage: python -m {__spec__.name if __spec__ else 'libprobe'} {{{','.join(PROBES)}}}", file=sys.stderr)
        return 2
    try:
        result = PROBES[argv[0]]()
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(PROBE_MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
