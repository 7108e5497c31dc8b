"""NVIDIA GPUs from recorded nvidia-smi and NVML probe outputs, CUDA_VISIBLE_DEVICES, and Jetson boards."""

from __future__ import annotations

from pathlib import Path

import pytest

from localinfer.hardware.nvidia import (
    NvidiaDevice,
    order_note,
    parse_nvidia_smi,
    parse_nvml,
    parse_tegra_release,
    read_jetson,
    select_visible,
    to_gpu_info,
)
from localinfer.hardware.probes import parse_probe_output
from localinfer.hardware.profile import GiB
from tests.hardware.data import recorded

MiB = 1 << 20


def smi_devices() -> list[NvidiaDevice]:
    return parse_nvidia_smi(recorded("nvidia_smi_2gpus.csv"))


def test_nvidia_smi_csv_gives_both_gpus_with_memory_capability_driver_and_uuid() -> None:
    first, second = smi_devices()
    assert first == NvidiaDevice(
        index=0,
        name="NVIDIA GeForce RTX 4090",
        uuid="GPU-5d3c9a7e-2b1f-4c8e-9a6d-0f1e2d3c4b5a",
        memory_total=24564 * MiB,
        memory_free=23714 * MiB,
        compute_capability=(8, 9),
        driver="550.54.15",
        source="nvidia-smi",
    )
    assert (second.index, second.name, second.compute_capability) == (1, "NVIDIA GeForce RTX 3090", (8, 6))


def test_nvidia_smi_without_the_uuid_column_and_with_unknown_values_still_parses() -> None:
    (device,) = parse_nvidia_smi("0, NVIDIA GB10, [N/A], [N/A], 12.1, 580.95.05\n")
    assert device.uuid is None
    assert device.memory_total is None and device.memory_free is None
    assert device.compute_capability == (12, 1)


def test_nvidia_smi_error_text_gives_no_gpus() -> None:
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    assert parse_nvidia_smi(text) == []


def test_the_nvml_probes_output_gives_its_gpus_despite_library_noise() -> None:
    data = parse_probe_output(recorded("nvml_probe_stdout.txt"))
    assert data is not None
    devices = parse_nvml(data)
    assert [d.index for d in devices] == [0, 1]
    assert devices[0].name == "NVIDIA A100-SXM4-80GB"
    assert devices[0].memory_total == 80 * GiB
    assert devices[1].memory_free == 40 * GiB
    assert devices[0].compute_capability == (8, 0)
    assert {d.driver for d in devices} == {"550.54.15"} and {d.source for d in devices} == {"nvml"}


def test_unset_cuda_visible_devices_shows_every_gpu() -> None:
    visible, notes = select_visible(smi_devices(), None)
    assert [d.name for d in visible] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    assert notes == []


@pytest.mark.parametrize("value", ["", "-1", " "])
def test_empty_or_minus_one_hides_every_gpu(value: str) -> None:
    visible, notes = select_visible(smi_devices(), value)
    assert visible == []
    assert any("hides 2 of 2" in note for note in notes)


def test_indices_select_and_renumber_gpus_in_the_listed_order() -> None:
    visible, notes = select_visible(smi_devices(), "1,0")
    assert [(d.index, d.name) for d in visible] == [(0, "NVIDIA GeForce RTX 3090"), (1, "NVIDIA GeForce RTX 4090")]
    assert notes == []


def test_a_single_index_hides_the_others_and_says_so() -> None:
    visible, notes = select_visible(smi_devices(), "1")
    assert [(d.index, d.name) for d in visible] == [(0, "NVIDIA GeForce RTX 3090")]
    assert any("hides 1 of 2" in note for note in notes)


def test_uuids_and_unique_uuid_prefixes_select_gpus() -> None:
    visible, _ = select_visible(smi_devices(), "GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d,GPU-5d3c")
    assert [d.name for d in visible] == ["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090"]


def test_the_list_ends_at_the_first_entry_that_names_no_gpu_as_in_cuda() -> None:
    visible, notes = select_visible(smi_devices(), "0,7,1")
    assert [d.name for d in visible] == ["NVIDIA GeForce RTX 4090"]
    assert any("'7'" in note for note in notes)


def test_mig_instances_leave_every_gpu_listed_with_a_note() -> None:
    visible, notes = select_visible(smi_devices(), "MIG-4b6f0c1e-9d4a-5b2c-8e7f-1a2b3c4d5e6f")
    assert len(visible) == 2
    assert any("MIG" in note for note in notes)


def test_different_gpus_without_pci_bus_order_get_an_order_note() -> None:
    assert order_note(smi_devices(), None) is not None
    assert order_note(smi_devices(), "PCI_BUS_ID") is None
    assert order_note(smi_devices()[:1], None) is None


def test_a_gpu_that_reports_no_memory_is_taken_to_share_the_ram() -> None:
    (device,) = parse_nvidia_smi("0, NVIDIA GB10, [N/A], [N/A], 12.1, 580.95.05\n")
    gpu = to_gpu_info(device, ram_total=128 * GiB, ram_available=100 * GiB)
    assert gpu.unified_memory and gpu.memory_total == 128 * GiB and gpu.memory_free == 100 * GiB
    assert (gpu.vendor, gpu.api, gpu.source) == ("nvidia", "cuda", "nvidia-smi")


def test_the_tegra_release_names_the_l4t_version() -> None:
    text = "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 2023\n"
    assert parse_tegra_release(text) == "R35.4.1"
    assert parse_tegra_release("garbage") is None


def test_a_jetson_orin_is_a_unified_memory_cuda_gpu(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic\n")
    (tmp_path / "proc/device-tree").mkdir(parents=True)
    (tmp_path / "proc/device-tree/model").write_text("NVIDIA Jetson AGX Orin Developer Kit\0")
    gpu = read_jetson(tmp_path, ram_total=64 * GiB, ram_available=60 * GiB)
    assert gpu is not None
    assert gpu.name == "NVIDIA Jetson AGX Orin Developer Kit"
    assert (gpu.compute_capability, gpu.driver, gpu.api) == ((8, 7), "R36.3.0", "cuda")
    assert gpu.unified_memory and gpu.memory_total == 64 * GiB


def test_a_board_without_a_tegra_release_is_no_jetson(tmp_path: Path) -> None:
    assert read_jetson(tmp_path, ram_total=GiB, ram_available=GiB) is None
