"""What a model takes and what the machine has free, per device, for the scheduler.

A device is ``ram`` or the planner's GPU device (``cuda:0``, ``cuda:0,1`` for a model split over two, ``metal``).
RAM is read from the machine at each look (psutil, capped by the cgroup limit). A GPU's free memory cannot be read
that cheaply, so it is what the probe found at start less what the models loaded on it are estimated to take.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from localinfer.hardware.memory import detect_memory
from localinfer.hardware.plan import Plan
from localinfer.hardware.profile import HardwareProfile

RAM = "ram"


def plan_need(chosen: Plan) -> dict[str, int]:
    """What a model loaded as ``chosen`` takes: all of it on the GPU device when layers are offloaded (the weights
    left in RAM are mapped from the file and cost little), in RAM otherwise."""
    on_gpu = chosen.gpu_layers > 0 and chosen.device not in ("cpu", "")
    return {chosen.device if on_gpu else RAM: chosen.memory_bytes}


def _free_ram() -> int:
    return detect_memory()[0].available


class MachineMemory:
    """Free bytes per device now (a ``MemoryProbe``); ``loaded`` gives what the loaded models take, device by
    device."""

    def __init__(
        self,
        hardware: HardwareProfile | None,
        loaded: Callable[[], Iterable[Mapping[str, int]]],
        free_ram: Callable[[], int] = _free_ram,
    ) -> None:
        self._gpu_free_at_start: dict[int, int] = {}
        for gpu in hardware.gpus if hardware is not None else ():
            if not gpu.unified_memory:
                self._gpu_free_at_start[gpu.index] = (
                    gpu.memory_free if gpu.memory_free is not None else int(gpu.memory_total * 0.9)
                )
        self._loaded = loaded
        self._free_ram = free_ram

    def __call__(self, asked: Iterable[str] = ()) -> dict[str, int]:
        """Free bytes of RAM, of each GPU found at start and of each device in ``asked``."""
        free = {RAM: self._free_ram()}
        taken: dict[int, float] = {}  # per GPU index; a model split over several GPUs takes a share of each
        devices: set[str] = {f"cuda:{i}" for i in self._gpu_free_at_start} | set(asked)
        for need in self._loaded():
            for device, size in need.items():
                devices.add(device)
                indexes = _indexes(device)
                for index in indexes:
                    taken[index] = taken.get(index, 0) + size / len(indexes)
        for device in devices - {RAM}:
            indexes = _indexes(device)
            if not indexes:  # metal, or a GPU without an index: unified memory, the RAM itself
                free[device] = free[RAM]
                continue
            free[device] = int(sum(self._gpu_free_at_start.get(i, 0) - taken.get(i, 0) for i in indexes))
        return free


def _indexes(device: str) -> list[int]:
    _, _, numbers = device.partition(":")
    return [int(n) for n in numbers.split(",") if n.isdigit()]
