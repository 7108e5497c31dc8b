"""``localinfer rpc --mem``: cap the memory a lent device reports, so a client shares fewer layers to it.

llama.cpp's RPC server answers GET_DEVICE_MEMORY with what the device itself reports, and a CPU reports all of the
machine's RAM as free; this llama.cpp's rpc-server has no setting to offer less. The cap replaces the device's
``get_memory`` (the third function of ``struct ggml_backend_device_i``, the first member of ``struct
ggml_backend_device``, ggml-backend-impl.h) with one that reports at most the cap, in this process only. What the
device may allocate is not limited: like rpc-server's former ``--mem``, it is what the client plans by.
"""

from __future__ import annotations

import ctypes

_GET_MEMORY_SLOT = 2  # get_name, get_description, get_memory, ...
_GetMemory = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
_kept: list[object] = []  # the callbacks and the functions they wrap, alive as long as the process


def cap_reported_memory(device: int, limit: int) -> None:
    """Make the ggml device at address ``device`` report at most ``limit`` bytes free and in total from now on
    (ggml_backend_dev_memory, and so an RPC client's GET_DEVICE_MEMORY)."""
    slot = ctypes.c_void_p.from_address(device + _GET_MEMORY_SLOT * ctypes.sizeof(ctypes.c_void_p))
    if not slot.value:
        return  # a device that reports no memory: nothing to cap
    original = _GetMemory(slot.value)

    def capped(dev: int, free: ctypes._Pointer[ctypes.c_size_t], total: ctypes._Pointer[ctypes.c_size_t]) -> None:
        original(dev, free, total)
        free[0] = min(free[0], limit)
        total[0] = min(total[0], limit)

    replacement = _GetMemory(capped)
    _kept.extend((original, replacement))
    slot.value = ctypes.cast(replacement, ctypes.c_void_p).value
