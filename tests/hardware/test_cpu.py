"""CPU facts from recorded /proc/cpuinfo and sysctl outputs."""

from __future__ import annotations

import pytest

from localinfer.hardware.cpu import detect_cpu, normalize_arch, parse_cpuinfo, parse_sysctl, sysctl_features
from tests.hardware.data import recorded


def test_this_x86_vm_reports_its_model_and_avx512_features_without_amx() -> None:
    facts = parse_cpuinfo(recorded("cpuinfo_x86_vm.txt"))
    assert facts.model == "Intel(R) Xeon(R) Processor"
    assert facts.features == (
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512_vnni",
        "avx512_bf16",
    )


def test_a_sapphire_rapids_cpu_reports_amx_in_canonical_order() -> None:
    facts = parse_cpuinfo(recorded("cpuinfo_x86_amx.txt"))
    assert facts.model == "Intel(R) Xeon(R) Platinum 8488C"
    assert facts.features[-3:] == ("amx_tile", "amx_int8", "amx_bf16")
    assert "avx512_bf16" in facts.features


def test_a_raspberry_pi_is_named_by_its_board_and_asimd_is_neon() -> None:
    facts = parse_cpuinfo(recorded("cpuinfo_arm_rpi5.txt"))
    assert facts.model == "Raspberry Pi 5 Model B Rev 1.0"
    assert facts.features == ("neon", "dotprod")


def test_an_arm_server_without_a_model_line_is_named_by_its_cpu_part() -> None:
    facts = parse_cpuinfo(recorded("cpuinfo_arm_graviton3.txt"))
    assert facts.model == "Neoverse-V1"
    assert facts.features == ("neon", "sve", "dotprod", "i8mm")


def test_empty_cpuinfo_gives_no_model_and_no_features() -> None:
    facts = parse_cpuinfo("")
    assert facts.model is None
    assert facts.features == ()


def test_macos_sysctl_gives_the_chip_and_its_arm_features() -> None:
    values = parse_sysctl(recorded("sysctl_macos_m2pro.txt"))
    assert values["machdep.cpu.brand_string"] == "Apple M2 Pro"
    assert values["hw.memsize"] == "34359738368"
    assert sysctl_features(values) == ("neon", "dotprod", "i8mm")


def test_sysctl_error_lines_are_skipped() -> None:
    values = parse_sysctl("sysctl: unknown oid 'iogpu.wired_limit_mb'\nhw.optional.avx2_0: 1\n")
    assert values == {"hw.optional.avx2_0": "1"}
    assert sysctl_features(values) == ("avx2",)


@pytest.mark.parametrize(
    ("machine", "arch"),
    [("aarch64", "arm64"), ("ARM64", "arm64"), ("AMD64", "x86_64"), ("x86_64", "x86_64"), ("i686", "x86")],
)
def test_architectures_are_normalized(machine: str, arch: str) -> None:
    assert normalize_arch(machine) == arch


def test_detect_cpu_on_linux_counts_cores_and_reads_features() -> None:
    info, _ = detect_cpu("linux", cpuinfo=recorded("cpuinfo_arm_rpi5.txt"))
    assert info.model == "Raspberry Pi 5 Model B Rev 1.0"
    assert info.features == ("neon", "dotprod")
    assert 1 <= info.physical_cores <= info.logical_cores


def test_detect_cpu_on_linux_without_cpuinfo_says_the_features_are_unknown() -> None:
    info, notes = detect_cpu("linux")
    assert info.features == ()
    assert any("/proc/cpuinfo" in note for note in notes)
