"""llama.cpp's RPC backend through ggml's device registry: remote workers registered as devices (``serve --rpc``),
this machine's devices lent to others (``localinfer rpc``), and where a model's layers go among them.

ggml's registry functions live in the libraries llama-cpp-python installs beside libllama (the same copies
llama.cpp uses, so what is registered here is what the model loader sees). The RPC functions are found through
the registry, as llama-server and rpc-server find them, so a build with the backends as loadable modules works too.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from localinfer.backends.base import DeviceUse
from localinfer.backends.llamacpp.rpc.wire import probe
from localinfer.errors import ConfigError
from localinfer.hardware import layer_split
from localinfer.models.metadata.gguf_tensors import TensorEntry, read_gguf_tensors

log = logging.getLogger(__name__)

# ggml-backend.h's enum ggml_backend_dev_type
DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
_GPU, _IGPU = 1, 2

_registered: dict[str, tuple[Device, ...]] = {}  # endpoint -> its devices, registered once per process


@dataclass(frozen=True)
class Device:
    """One ggml device: ``name`` as llama.cpp logs it (CPU, CUDA0, RPC0), what it is, its memory in bytes."""

    name: str
    description: str
    kind: str  # DEVICE_TYPES' values
    free: int
    total: int
    handle: int  # ggml_backend_dev_t


def _library(name: str) -> ctypes.CDLL:
    import llama_cpp

    folder = Path(llama_cpp.__file__).parent / "lib"
    suffix = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
    for path in (folder / f"lib{name}{suffix}", folder / f"{name}{suffix}", folder / f"lib{name}.so"):
        if path.exists():
            return ctypes.CDLL(str(path))
    raise ConfigError(f"llama.cpp's {name} library is not in {folder}", hint="reinstall localinfer (scripts/setup)")


@cache
def _ggml() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """libggml (the registry) and libggml-base (devices), their functions typed."""
    import llama_cpp.llama_cpp  # noqa: F401  loads libllama and the libraries it needs, these among them

    reg, base = _library("ggml"), _library("ggml-base")
    p, s = ctypes.c_void_p, ctypes.c_char_p
    for lib, fn, args, result in (
        (reg, "ggml_backend_reg_by_name", [s], p),
        (reg, "ggml_backend_register", [p], None),
        (reg, "ggml_backend_dev_count", [], ctypes.c_size_t),
        (reg, "ggml_backend_dev_get", [ctypes.c_size_t], p),
        (reg, "ggml_backend_dev_by_name", [s], p),
        (base, "ggml_backend_reg_get_proc_address", [p, s], p),
        (base, "ggml_backend_reg_dev_count", [p], ctypes.c_size_t),
        (base, "ggml_backend_reg_dev_get", [p, ctypes.c_size_t], p),
        (base, "ggml_backend_dev_name", [p], s),
        (base, "ggml_backend_dev_description", [p], s),
        (base, "ggml_backend_dev_type", [p], ctypes.c_int),
        (
            base,
            "ggml_backend_dev_memory",
            [p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
            None,
        ),
    ):
        f = getattr(lib, fn)
        f.argtypes, f.restype = args, result
    return reg, base


def _rpc_function(name: str) -> int:
    reg, base = _ggml()
    rpc = reg.ggml_backend_reg_by_name(b"RPC")
    address = base.ggml_backend_reg_get_proc_address(rpc, name.encode()) if rpc else None
    if not address:
        raise ConfigError(
            "this llama.cpp was built without its RPC backend",
            hint="rebuild it with scripts/setup (it sets -DGGML_RPC=ON), or check CMAKE_ARGS for -DGGML_RPC=OFF",
        )
    return int(address)


def available() -> bool:
    """llama.cpp here has its RPC backend (built with -DGGML_RPC=ON)."""
    try:
        _rpc_function("ggml_backend_rpc_start_server")
    except ConfigError:
        return False
    return True


def _device(handle: int) -> Device:
    _, base = _ggml()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    base.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    return Device(
        name=(base.ggml_backend_dev_name(handle) or b"").decode(),
        description=(base.ggml_backend_dev_description(handle) or b"").decode(),
        kind=DEVICE_TYPES.get(base.ggml_backend_dev_type(handle), "other"),
        free=free.value,
        total=total.value,
        handle=handle,
    )


def devices() -> list[Device]:
    """Every device llama.cpp knows in this process (the CPU, GPUs, accelerators, RPC workers registered)."""
    reg, _ = _ggml()
    return [_device(reg.ggml_backend_dev_get(i)) for i in range(reg.ggml_backend_dev_count())]


def add_workers(endpoints: tuple[str, ...]) -> list[Device]:
    """Register the RPC workers at ``endpoints`` (each once per process) as devices llama.cpp can load layers onto;
    their devices, in the order given. Each is checked first (wire.probe), since llama.cpp aborts the process
    on one it cannot reach. Raises RpcWorkerError (unreachable, busy, another protocol) or ConfigError (no RPC
    backend in this build)."""
    found: list[Device] = []
    for endpoint in endpoints:
        if endpoint not in _registered:
            add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(
                _rpc_function("ggml_backend_rpc_add_server")
            )
            probe(endpoint)
            reg_handle = add_server(endpoint.encode())
            if not reg_handle:
                raise ConfigError(f"RPC worker {endpoint} offers no device", hint="check its --device")
            reg, base = _ggml()
            reg.ggml_backend_register(reg_handle)
            count = base.ggml_backend_reg_dev_count(reg_handle)
            _registered[endpoint] = tuple(_device(base.ggml_backend_reg_dev_get(reg_handle, i)) for i in range(count))
            log.info(
                "RPC worker %s: %s",
                endpoint,
                ", ".join(f"{d.name} ({d.free >> 20} MiB free of {d.total >> 20})" for d in _registered[endpoint]),
            )
        found.extend(_refreshed(d) for d in _registered[endpoint])
    return found


def _refreshed(device: Device) -> Device:
    return _device(device.handle)


def offload_devices(remote: list[Device]) -> list[Device]:
    """The devices a model's offloaded layers are split over, in llama.cpp's order: the RPC workers' first (fewer
    bytes cross the network), then this machine's GPUs, or its integrated GPUs when it has no other."""
    local = [d for d in devices() if not d.name.startswith("RPC")]
    gpus = [d for d in local if d.kind == "gpu"] or [d for d in local if d.kind == "igpu"]
    return remote + gpus


def lend(endpoint: str, cache_dir: Path | None, threads: int, lent: list[Device]) -> None:
    """Serve ``lent`` to RPC clients at ``endpoint`` (llama.cpp's ggml_backend_rpc_start_server), one client at a
    time; returns only if the server cannot start (the address is taken or cannot be bound)."""
    start = ctypes.CFUNCTYPE(
        None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)
    )(_rpc_function("ggml_backend_rpc_start_server"))
    handles = (ctypes.c_void_p * len(lent))(*(d.handle for d in lent))
    start(endpoint.encode(), str(cache_dir).encode() if cache_dir else None, threads, len(lent), handles)


@dataclass(frozen=True)
class Placement:
    """The devices a model's offloaded layers go to and each one's share, passed to llama.cpp as they are (its
    ``devices`` and ``tensor_split``), so the layer map this describes is the one llama.cpp makes."""

    devices: tuple[Device, ...]
    shares: tuple[float, ...]

    def arrays(self, max_devices: int) -> tuple[ctypes.Array[ctypes.c_void_p], ctypes.Array[ctypes.c_float]]:
        """llama_model_params' ``devices`` (NULL-terminated) and ``tensor_split`` (``max_devices`` long); the
        caller keeps them alive until the model is loaded."""
        handles = (ctypes.c_void_p * (len(self.devices) + 1))(*(d.handle for d in self.devices), None)
        split = (ctypes.c_float * max_devices)(*self.shares[:max_devices])
        return handles, split

    def memory(self, path: Path, n_layer: int, gpu_layers: int, kv_bytes: int) -> tuple[DeviceUse, ...]:
        """What the model at ``path`` holds on each device: its layers' weights where llama.cpp puts them (the
        input embeddings stay on the CPU; tied output weights are copied to the output layer's device) and
        ``kv_bytes`` of KV cache shared evenly by the layers, each part on its layer's device; this machine's CPU
        first, then the devices in order."""
        where = layer_split.assign(n_layer, gpu_layers, self.shares)
        held = [0] * (len(self.devices) + 1)  # [0]: the CPU
        tensors, _ = read_gguf_tensors(path)
        names = {t.name for t in tensors}
        for t in tensors:
            size = _tensor_bytes(t)
            if t.name.startswith("blk."):
                held[where[min(int(t.name.split(".")[1]), n_layer)] + 1] += size
            elif t.name.startswith("output"):
                held[where[-1] + 1] += size
            else:
                held[0] += size
                if t.name == "token_embd.weight" and "output.weight" not in names:
                    held[where[-1] + 1] += size
        for layer in range(n_layer):
            held[where[layer] + 1] += kv_bytes // max(n_layer, 1)
        endpoints = {d.handle: endpoint for endpoint, found in _registered.items() for d in found}
        uses = [DeviceUse("CPU", "local", held[0])]
        for device, size in zip(self.devices, held[1:], strict=True):
            if size:
                uses.append(DeviceUse(device.name, endpoints.get(device.handle, "local"), size))
        return tuple(uses)

    def describe(self, n_layer: int, gpu_layers: int) -> str:
        """Which layers go where, with each device's share and free memory."""
        where = layer_split.assign(n_layer, gpu_layers, self.shares)
        names = [d.name for d in self.devices]
        devices = "; ".join(
            f"{d.name} = {d.description} ({d.free >> 20} MiB free, share {s / sum(self.shares):.0%})"
            for d, s in zip(self.devices, self.shares, strict=True)
        )
        return f"{layer_split.describe(where, names)} ({devices})"


def placement(endpoints: tuple[str, ...], tensor_split: tuple[float, ...]) -> Placement | None:
    """Where offloaded layers go when RPC workers or a tensor split are asked for (None: as llama.cpp chooses):
    the workers (registered now, add_workers) and this machine's GPUs, shared as ``tensor_split`` says or else by
    their free memory, as llama.cpp shares them. Raises RpcWorkerError or ConfigError."""
    if not endpoints and not tensor_split:
        return None
    targets = offload_devices(add_workers(endpoints))
    if not targets:
        raise ConfigError("--tensor-split needs a GPU or an RPC worker", hint="drop --tensor-split, or add --rpc")
    if len(tensor_split) > len(targets):
        names = ", ".join(d.name for d in targets)
        raise ConfigError(
            f"--tensor-split gives {len(tensor_split)} shares for {len(targets)} devices ({names})",
            hint="give one share per device, the RPC workers first",
        )
    if tensor_split:
        shares = tensor_split + (0.0,) * (len(targets) - len(tensor_split))
    else:
        host = next((d for d in devices() if d.kind == "cpu"), None)
        shares = tuple(float(d.free or (host.free if host and not d.total else 0)) for d in targets)
    return Placement(tuple(targets), shares)


def _tensor_bytes(tensor: TensorEntry) -> int:
    import gguf

    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(tensor.type)]
    except (ValueError, KeyError):
        return 0
    return tensor.n_elements // int(block) * int(type_size)
