"""GPUs other than NVIDIA's: AMD through Linux sysfs, Apple Silicon's unified memory, and Windows adapters that
ONNX Runtime reaches through DirectML. Readers take a filesystem root; builders take recorded values."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from localinfer.hardware.profile import GiB, GPUApi, GPUInfo, GPUVendor

MiB = 1 << 20
AMD_VENDOR_ID = "0x1002"
_PCI_VENDORS: dict[int, GPUVendor] = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}
# Where libdrm keeps AMD's marketing names (device id, revision -> "AMD Radeon RX 7900 XTX").
_AMDGPU_IDS = ("usr/share/libdrm/amdgpu.ids", "opt/amdgpu/share/libdrm/amdgpu.ids")


def parse_amdgpu_ids(text: str) -> dict[tuple[str, str], str]:
    """libdrm's ``amdgpu.ids`` (``744C,\\tC8,\\tAMD Radeon RX 7900 XTX`` lines) as {(device, revision): name},
    upper-case hex without ``0x``."""
    names: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        parts = [part.strip() for part in line.split(",", 2)]
        if len(parts) == 3 and all(parts):
            names[(parts[0].upper(), parts[1].upper())] = parts[2]
    return names


def read_amd_gpus(root: Path = Path("/")) -> list[GPUInfo]:
    """The AMD GPUs under ``root``'s ``sys/class/drm/card*/device`` (PCI vendor 0x1002), with VRAM total and
    free from ``mem_info_vram_*``. Cards without those files (no amdgpu driver) are skipped."""
    names: dict[tuple[str, str], str] = {}
    for ids in _AMDGPU_IDS:
        text = _read(root / ids)
        if text is not None:
            names = parse_amdgpu_ids(text)
            break
    api: GPUApi = "rocm" if (root / "sys/class/kfd/kfd").exists() else "vulkan"
    driver = _read(root / "sys/module/amdgpu/version")
    cards = sorted(
        (p for p in (root / "sys/class/drm").glob("card*") if re.fullmatch(r"card\d+", p.name)),
        key=lambda p: int(p.name[4:]),
    )
    gpus: list[GPUInfo] = []
    for card in cards:
        device = card / "device"
        if (_read(device / "vendor") or "").strip().lower() != AMD_VENDOR_ID:
            continue
        total = _read_int(device / "mem_info_vram_total")
        if total is None:
            continue
        used = _read_int(device / "mem_info_vram_used")
        gpus.append(
            GPUInfo(
                vendor="amd",
                name=_amd_name(device, names),
                index=len(gpus),
                memory_total=total,
                memory_free=max(total - used, 0) if used is not None else None,
                driver=driver.strip() if driver else None,
                api=api,
                source="sysfs",
            )
        )
    return gpus


def apple_gpu(chip: str, *, ram_total: int, ram_available: int, wired_limit_mb: int | None = None) -> GPUInfo:
    """Apple Silicon's GPU. It shares the RAM; Metal lets it use its recommended working set: about 75 % of RAM
    above 36 GiB and two thirds below, unless ``sysctl iogpu.wired_limit_mb`` sets the limit."""
    if wired_limit_mb:
        usable = min(wired_limit_mb * MiB, ram_total)
    else:
        usable = ram_total * 3 // 4 if ram_total > 36 * GiB else ram_total * 2 // 3
    return GPUInfo(
        vendor="apple",
        name=chip or "Apple Silicon GPU",
        index=0,
        memory_total=usable,
        memory_free=min(ram_available, usable),
        api="metal",
        unified_memory=True,
        source="sysctl",
    )


def directml_gpus(devices: Iterable[Mapping[str, Any]], *, skip_vendors: Iterable[str] = ()) -> list[GPUInfo]:
    """The GPU adapters ONNX Runtime offers to DirectML (from the ``onnx`` probe's ``devices``), best effort:
    the name and dedicated memory come from the adapter's DXGI description. ``skip_vendors`` are left out
    (NVIDIA GPUs already found through NVML)."""
    skip = set(skip_vendors)
    gpus: list[GPUInfo] = []
    for device in devices:
        if device.get("ep") != "DmlExecutionProvider" or device.get("type") != "GPU":
            continue
        vendor = _PCI_VENDORS.get(int(device.get("vendor_id") or 0), "other")
        if vendor in skip:
            continue
        metadata = device.get("metadata") or {}
        name = " ".join(str(metadata.get("Description") or f"{device.get('vendor') or 'unknown'} GPU").split())
        memory = re.fullmatch(r"(\d+) MB", str(metadata.get("DxgiVideoMemory", "")).strip())
        gpus.append(
            GPUInfo(
                vendor=vendor,
                name=name,
                index=len(gpus),
                memory_total=int(memory[1]) * MiB if memory else 0,
                api="directml",
                source="onnxruntime",
            )
        )
    return gpus


def _amd_name(device: Path, names: Mapping[tuple[str, str], str]) -> str:
    product = (_read(device / "product_name") or "").strip()
    if product:
        return product
    device_id = _hex(_read(device / "device"))
    revision = _hex(_read(device / "revision"))
    return names.get((device_id, revision)) or f"AMD GPU 0x{device_id.lower() or '?'}"


def _hex(text: str | None) -> str:
    return (text or "").strip().lower().removeprefix("0x").upper()


def _read_int(path: Path) -> int | None:
    text = (_read(path) or "").strip()
    return int(text) if text.isdigit() else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None
