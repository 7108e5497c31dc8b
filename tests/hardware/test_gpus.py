"""AMD GPUs from a fake sysfs tree, Apple Silicon's unified memory, and DirectML adapters from ONNX Runtime."""

from __future__ import annotations

import shutil
from pathlib import Path

from localinfer.hardware.gpus import apple_gpu, directml_gpus, parse_amdgpu_ids, read_amd_gpus
from localinfer.hardware.profile import GiB
from tests.hardware.data import DATA, recorded

MiB = 1 << 20


def add_card(root: Path, card: str, *, vendor: str, device: str, revision: str = "0xc8", **files: str) -> Path:
    """``root/sys/class/drm/<card>/device`` with PCI ids and the given amdgpu files (``mem_info_vram_total``...)."""
    folder = root / "sys/class/drm" / card / "device"
    folder.mkdir(parents=True)
    for name, text in {"vendor": vendor, "device": device, "revision": revision, **files}.items():
        (folder / name).write_text(text + "\n")
    return folder


def amd_root(tmp_path: Path) -> Path:
    """A machine with an RX 7900 XTX (card1), an NVIDIA card (card0), a connector entry and libdrm's names."""
    add_card(tmp_path, "card0", vendor="0x10de", device="0x2684")
    add_card(
        tmp_path,
        "card1",
        vendor="0x1002",
        device="0x744c",
        revision="0xc8",
        mem_info_vram_total=str(24560 * MiB),
        mem_info_vram_used=str(560 * MiB),
    )
    (tmp_path / "sys/class/drm/card1-DP-1").mkdir()
    (tmp_path / "usr/share/libdrm").mkdir(parents=True)
    shutil.copy(DATA / "amdgpu.ids", tmp_path / "usr/share/libdrm/amdgpu.ids")
    return tmp_path


def test_amdgpu_ids_map_device_and_revision_to_marketing_names() -> None:
    names = parse_amdgpu_ids(recorded("amdgpu.ids"))
    assert names[("744C", "C8")] == "AMD Radeon RX 7900 XTX"
    assert len(names) == 3


def test_an_amd_card_in_sysfs_gives_its_marketing_name_and_vram(tmp_path: Path) -> None:
    (gpu,) = read_amd_gpus(amd_root(tmp_path))
    assert (gpu.vendor, gpu.name, gpu.index, gpu.source) == ("amd", "AMD Radeon RX 7900 XTX", 0, "sysfs")
    assert gpu.memory_total == 24560 * MiB
    assert gpu.memory_free == 24000 * MiB
    assert gpu.api == "vulkan"  # no /sys/class/kfd: ROCm cannot reach it


def test_product_name_wins_and_kfd_means_rocm(tmp_path: Path) -> None:
    root = amd_root(tmp_path)
    (root / "sys/class/drm/card1/device/product_name").write_text("AMD Instinct MI210\n")
    (root / "sys/class/kfd/kfd").mkdir(parents=True)
    (root / "sys/module/amdgpu").mkdir(parents=True)
    (root / "sys/module/amdgpu/version").write_text("6.7.0\n")
    (gpu,) = read_amd_gpus(root)
    assert (gpu.name, gpu.api, gpu.driver) == ("AMD Instinct MI210", "rocm", "6.7.0")


def test_an_unknown_amd_device_is_named_by_its_pci_id(tmp_path: Path) -> None:
    add_card(tmp_path, "card0", vendor="0x1002", device="0x1234", mem_info_vram_total=str(512 * MiB))
    (gpu,) = read_amd_gpus(tmp_path)
    assert gpu.name == "AMD GPU 0x1234"
    assert gpu.memory_free is None


def test_no_drm_folder_means_no_amd_gpus(tmp_path: Path) -> None:
    assert read_amd_gpus(tmp_path) == []


def test_apple_silicon_gets_two_thirds_of_small_ram_and_three_quarters_of_large() -> None:
    small = apple_gpu("Apple M2 Pro", ram_total=32 * GiB, ram_available=20 * GiB)
    large = apple_gpu("Apple M2 Max", ram_total=64 * GiB, ram_available=50 * GiB)
    assert small.memory_total == 32 * GiB * 2 // 3 and small.memory_free == 20 * GiB
    assert large.memory_total == 48 * GiB and large.memory_free == 48 * GiB
    assert (large.vendor, large.api, large.unified_memory) == ("apple", "metal", True)


def test_apples_wired_limit_sets_the_gpus_memory() -> None:
    gpu = apple_gpu("Apple M3 Max", ram_total=128 * GiB, ram_available=100 * GiB, wired_limit_mb=120 * 1024)
    assert gpu.memory_total == 120 * GiB


def test_directml_adapters_come_from_onnxruntimes_gpu_devices() -> None:
    devices = [
        {"ep": "CPUExecutionProvider", "type": "CPU", "vendor_id": 0x8086, "metadata": {}},
        {
            "ep": "DmlExecutionProvider",
            "type": "GPU",
            "vendor": "Advanced Micro Devices, Inc.",
            "vendor_id": 0x1002,
            "device_id": 0x744C,
            "metadata": {"Description": "AMD Radeon RX 7900 XTX", "DxgiVideoMemory": "24560 MB", "Discrete": "1"},
        },
        {"ep": "DmlExecutionProvider", "type": "GPU", "vendor_id": 0x10DE, "metadata": {"Description": "RTX 4090"}},
    ]
    (gpu,) = directml_gpus(devices, skip_vendors=("nvidia",))
    assert (gpu.vendor, gpu.name, gpu.api, gpu.source) == ("amd", "AMD Radeon RX 7900 XTX", "directml", "onnxruntime")
    assert gpu.memory_total == 24560 * MiB
    assert len(directml_gpus(devices)) == 2
