"""llama-server's device flags: which of llama.cpp's devices a model may offload to (``--device``), their list
(``--list-devices``), and the quiet start of a GPU build on a machine without a GPU.

A device is named as llama.cpp names it (CPU, CUDA0, Vulkan1, RPC0[host:port]); ``none`` is the CPU alone. The
names are resolved with ``ggml_backend_dev_by_name`` and nothing else: asking a CUDA device for its free memory
creates a CUDA context on it (hundreds of MiB), which a model kept off the GPU must not hold.
"""

from __future__ import annotations

import ctypes
import logging

from localinfer.backends.llamacpp.rpc import devices as rpc
from localinfer.errors import ConfigError

# What ggml's CUDA backend logs as an error when it finds no device (or no driver) on a machine where a CUDA build
# runs: a GPU build on a CPU machine works, on the CPU, so this is said at INFO (llama-server prints it as an error).
_NO_GPU_FOUND = (
    "failed to initialize CUDA: no CUDA-capable device is detected",
    "failed to initialize CUDA: CUDA driver version is insufficient",
    "failed to initialize CUDA: forward compatibility was attempted on non supported HW",
)


def parse_devices(text: str) -> tuple[str, ...] | None:
    """llama-server's --device: device names, comma-separated, or ``none`` (the CPU alone: ``()``); None when
    ``text`` is empty (every device, as llama.cpp chooses). Raises ConfigError for an empty name."""
    if not text.strip():
        return None
    if text.strip().lower() == "none":
        return ()
    names = tuple(part.strip() for part in text.split(","))
    if not all(names):
        raise ConfigError(f"'{text}' is not a list of devices", hint="e.g. --device CUDA0,CUDA1, or --device none")
    return names


def resolve(names: tuple[str, ...]) -> ctypes.Array[ctypes.c_void_p]:
    """llama_model_params' ``devices`` for ``names``: their handles, NULL-terminated (an empty list: no device, the
    CPU alone); the caller keeps the array alive until the model is loaded. Raises ConfigError naming a device
    llama.cpp does not know, and the ones it does."""
    reg, _ = rpc._ggml()
    handles: list[int] = []
    for name in names:
        handle = reg.ggml_backend_dev_by_name(name.encode())
        if not handle:
            known = ", ".join(known_names()) or "none"
            raise ConfigError(f"no device named '{name}' (llama.cpp has: {known})", hint="see serve --list-devices")
        handles.append(handle)
    return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)


def known_names() -> list[str]:
    """The names of the devices a model can offload to (the CPU is not one: it always computes what is left)."""
    reg, base = rpc._ggml()
    handles = [reg.ggml_backend_dev_get(i) for i in range(reg.ggml_backend_dev_count())]
    return [(base.ggml_backend_dev_name(h) or b"").decode() for h in handles if base.ggml_backend_dev_type(h) != 0]


def listing() -> list[str]:
    """llama-server's --list-devices: one line per device a model can offload to, with its memory (asking for it
    starts a GPU's context, so only this listing does)."""
    lines = [
        f"  {d.name}: {d.description} ({d.total >> 20} MiB, {d.free >> 20} MiB free)"
        for d in rpc.devices()
        if d.kind != "cpu"
    ]
    return ["Available devices:", *(lines or ["  none: this llama.cpp offloads to no device (a CPU build)"])]


def log_level(level: int, message: str) -> int:
    """The Python logging level of a llama.cpp log line at llama.cpp's ``level`` (4 error, 3 warning): warnings
    and errors as such, except a GPU build's finding no GPU; the rest at DEBUG."""
    if level == 4 and any(found in message for found in _NO_GPU_FOUND):
        return logging.INFO
    return {4: logging.ERROR, 3: logging.WARNING}.get(level, logging.DEBUG)
