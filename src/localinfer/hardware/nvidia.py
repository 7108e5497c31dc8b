"""NVIDIA GPUs: NVML's answer (from the ``nvml`` library probe), ``nvidia-smi``'s CSV, Jetson boards, and the
``CUDA_VISIBLE_DEVICES`` filter. Every parser takes recorded text or JSON."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from localinfer.hardware.profile import GPUInfo

MiB = 1 << 20

NVIDIA_SMI_QUERY = (
    "--query-gpu=index,name,memory.total,memory.free,compute_cap,driver_version,uuid",
    "--format=csv,noheader,nounits",
)

# Jetson boards by their device-tree model, the most specific first.
_JETSON_COMPUTE = (("orin", (8, 7)), ("xavier", (7, 2)), ("tx2", (6, 2)), ("tx1", (5, 3)), ("nano", (5, 3)))


@dataclass(frozen=True)
class NvidiaDevice:
    """One GPU as NVML or nvidia-smi lists it (PCI order), before ``CUDA_VISIBLE_DEVICES`` is applied."""

    index: int
    name: str
    uuid: str | None
    memory_total: int | None  # bytes; None where the driver does not say (unified memory: GB10)
    memory_free: int | None
    compute_capability: tuple[int, int] | None
    driver: str | None
    source: str


def parse_nvidia_smi(text: str) -> list[NvidiaDevice]:
    """The rows of ``nvidia-smi`` run with ``NVIDIA_SMI_QUERY`` (memory in MiB); the trailing ``uuid`` column
    may be missing. Rows that do not parse are skipped; ``[N/A]`` values become None."""
    devices: list[NvidiaDevice] = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        cells = [cell.strip() for cell in row]
        if len(cells) < 6 or not cells[0].isdigit():
            continue
        total, free = _mib(cells[2]), _mib(cells[3])
        devices.append(
            NvidiaDevice(
                index=int(cells[0]),
                name=cells[1],
                uuid=_known(cells[6]) if len(cells) > 6 else None,
                memory_total=total,
                memory_free=free,
                compute_capability=_capability(cells[4]),
                driver=_known(cells[5]),
                source="nvidia-smi",
            )
        )
    return devices


def parse_nvml(data: dict[str, Any]) -> list[NvidiaDevice]:
    """The GPUs in the ``nvml`` probe's JSON result (see ``libprobe.probe_nvml``)."""
    driver = data.get("driver")
    devices: list[NvidiaDevice] = []
    for gpu in data.get("gpus", ()):
        cc = gpu.get("compute_capability")
        devices.append(
            NvidiaDevice(
                index=int(gpu["index"]),
                name=str(gpu.get("name") or "NVIDIA GPU"),
                uuid=gpu.get("uuid"),
                memory_total=gpu.get("memory_total"),
                memory_free=gpu.get("memory_free"),
                compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
                driver=str(driver) if driver else None,
                source="nvml",
            )
        )
    return devices


def select_visible(devices: Sequence[NvidiaDevice], value: str | None) -> tuple[list[NvidiaDevice], list[str]]:
    """The devices CUDA shows under ``CUDA_VISIBLE_DEVICES=value``, renumbered as CUDA numbers them (0, 1, … in
    the listed order), and notes on what was hidden.

    Unset: all. Empty or ``-1``: none. Entries are indices or ``GPU-<uuid>`` (a unique prefix is enough); as in
    CUDA, the list ends at the first entry that names no device.
    """
    if value is None:
        return list(devices), []
    entries = [e.strip() for e in value.split(",")]
    if any(e.upper().startswith("MIG-") for e in entries):
        return list(devices), [
            f"CUDA_VISIBLE_DEVICES={value!r} names MIG instances: all GPUs are listed, each with its whole memory."
        ]
    chosen: list[NvidiaDevice] = []
    notes: list[str] = []
    for entry in entries:
        device = _lookup(devices, entry)
        if device is None:
            if entry and entry != "-1":
                notes.append(
                    f"CUDA_VISIBLE_DEVICES entry '{entry}' names no GPU here: it and later entries are ignored."
                )
            break
        if device not in chosen:
            chosen.append(device)
    hidden = len(devices) - len(chosen)
    if hidden:
        notes.append(
            f"CUDA_VISIBLE_DEVICES={value!r} hides {hidden} of {len(devices)} NVIDIA GPUs; "
            "GPU indices here count the visible ones, as CUDA does."
        )
    return [replace(device, index=i) for i, device in enumerate(chosen)], notes


def order_note(devices: Sequence[NvidiaDevice], cuda_device_order: str | None) -> str | None:
    """A warning when GPU indices may not be CUDA's: CUDA numbers the fastest GPU first unless
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, while NVML and nvidia-smi count in PCI order."""
    if len({d.name for d in devices}) < 2 or (cuda_device_order or "").upper() == "PCI_BUS_ID":
        return None
    return (
        "These NVIDIA GPUs differ and CUDA numbers the fastest first: set CUDA_DEVICE_ORDER=PCI_BUS_ID "
        "so that CUDA's GPU indices are the ones listed here."
    )


def to_gpu_info(device: NvidiaDevice, *, ram_total: int, ram_available: int) -> GPUInfo:
    """The profile's view of a device. A GPU whose driver reports no memory shares the RAM (GB10)."""
    unified = device.memory_total is None
    return GPUInfo(
        vendor="nvidia",
        name=device.name,
        index=device.index,
        memory_total=ram_total if unified else int(device.memory_total or 0),
        memory_free=ram_available if unified else device.memory_free,
        compute_capability=device.compute_capability,
        driver=device.driver,
        api="cuda",
        unified_memory=unified,
        source=device.source,
    )


def parse_tegra_release(text: str) -> str | None:
    """The L4T release of ``/etc/nv_tegra_release`` (``# R35 (release), REVISION: 4.1, …`` → ``R35.4.1``)."""
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return f"R{match[1]}.{match[2]}" if match else None


def read_jetson(root: Path, *, ram_total: int, ram_available: int) -> GPUInfo | None:
    """The integrated GPU of a Jetson board under ``root`` (``etc/nv_tegra_release`` present), or None."""
    try:
        release = (root / "etc/nv_tegra_release").read_text(errors="replace")
    except OSError:
        return None
    try:
        model = (root / "proc/device-tree/model").read_text(errors="replace").strip("\0 \n")
    except OSError:
        model = ""
    lowered = model.lower()
    capability = next((cc for key, cc in _JETSON_COMPUTE if key in lowered), None)
    return GPUInfo(
        vendor="nvidia",
        name=model or "NVIDIA Jetson",
        index=0,
        memory_total=ram_total,
        memory_free=ram_available,
        compute_capability=capability,
        driver=parse_tegra_release(release),
        api="cuda",
        unified_memory=True,
        source="tegra",
    )


def _lookup(devices: Sequence[NvidiaDevice], entry: str) -> NvidiaDevice | None:
    if entry.isdigit():
        return next((d for d in devices if d.index == int(entry)), None)
    if entry.upper().startswith("GPU-"):
        matches = [d for d in devices if d.uuid and d.uuid.lower().startswith(entry.lower())]
        return matches[0] if len(matches) == 1 else None
    return None


def _known(cell: str) -> str | None:
    return None if not cell or cell.startswith("[") else cell


def _mib(cell: str) -> int | None:
    return int(float(cell) * MiB) if re.fullmatch(r"\d+(\.\d+)?", cell) else None


def _capability(cell: str) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)\.(\d+)", cell)
    return (int(match[1]), int(match[2])) if match else None
