"""The CPU: model, architecture, cores and the SIMD features inference kernels use.

The parsers take text (``/proc/cpuinfo``, ``sysctl`` output), so they are tested with recorded outputs.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

from localinfer.hardware.profile import CPUInfo

# The flags that matter for inference, in the order reports list them.
FEATURES = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "neon",
    "sve",
    "dotprod",
    "i8mm",
)

# Linux names on ARM (``Features``) and macOS ``hw.optional`` names for the same features.
_LINUX_ALIASES = {"asimd": "neon", "asimddp": "dotprod"}
_SYSCTL_FEATURES = {
    "hw.optional.neon": "neon",
    "hw.optional.AdvSIMD": "neon",
    "hw.optional.arm.FEAT_DotProd": "dotprod",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
    "hw.optional.arm.FEAT_SVE": "sve",
    "hw.optional.sse4_2": "sse4_2",
    "hw.optional.avx1_0": "avx",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.fma": "fma",
    "hw.optional.f16c": "f16c",
    "hw.optional.avx512f": "avx512f",
    "hw.optional.avx512bw": "avx512bw",
    "hw.optional.avx512vnni": "avx512_vnni",
}

_ARCH_ALIASES = {
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv8": "arm64",
    "amd64": "x86_64",
    "x86_64": "x86_64",
    "x64": "x86_64",
    "em64t": "x86_64",
    "i386": "x86",
    "i686": "x86",
    "x86": "x86",
}

# ARM Ltd (implementer 0x41) CPU parts, for boards whose /proc/cpuinfo names no model.
_ARM_PARTS = {
    "0xd03": "Cortex-A53",
    "0xd04": "Cortex-A35",
    "0xd05": "Cortex-A55",
    "0xd07": "Cortex-A57",
    "0xd08": "Cortex-A72",
    "0xd09": "Cortex-A73",
    "0xd0a": "Cortex-A75",
    "0xd0b": "Cortex-A76",
    "0xd0c": "Neoverse-N1",
    "0xd0d": "Cortex-A77",
    "0xd40": "Neoverse-V1",
    "0xd41": "Cortex-A78",
    "0xd44": "Cortex-X1",
    "0xd49": "Neoverse-N2",
    "0xd4f": "Neoverse-V2",
}


@dataclass(frozen=True)
class CpuinfoFacts:
    model: str | None
    features: tuple[str, ...]


def normalize_arch(machine: str) -> str:
    """One name per architecture: ``aarch64``/``ARM64`` → ``arm64``, ``AMD64``/``x64`` → ``x86_64``."""
    lowered = machine.strip().lower()
    return _ARCH_ALIASES.get(lowered, lowered or "unknown")


def parse_cpuinfo(text: str) -> CpuinfoFacts:
    """The model name and inference features of Linux ``/proc/cpuinfo`` (x86 ``flags`` or ARM ``Features``).

    The model is ``model name`` (x86), else the board's ``Model`` or ``Hardware`` line, else the ARM core named
    by ``CPU part``; None when none of them is there.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and key not in fields:  # the first processor speaks for all
            fields[key] = value.strip()
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    model = fields.get("model name") or fields.get("Model") or fields.get("Hardware")
    if not model and fields.get("CPU implementer") == "0x41":
        model = _ARM_PARTS.get(fields.get("CPU part", "").lower())
    return CpuinfoFacts(model or None, select_features(flags))


def select_features(flags: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The inference features among ``flags``, under their common names, in ``FEATURES`` order."""
    present = {_LINUX_ALIASES.get(flag, flag) for flag in flags}
    return tuple(f for f in FEATURES if f in present)


def parse_sysctl(text: str) -> dict[str, str]:
    """``sysctl name...`` output (``name: value`` lines) as a dict; error lines are skipped."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and "." in key and " " not in key:  # sysctl names are dotted; "sysctl: unknown oid" is not
            values[key] = value.strip()
    return values


def sysctl_features(values: Mapping[str, str]) -> tuple[str, ...]:
    """The inference features macOS reports as ``hw.optional.* = 1``."""
    return select_features([name for key, name in _SYSCTL_FEATURES.items() if values.get(key) == "1"])


def detect_cpu(
    system: str, *, cpuinfo: str | None = None, sysctl: Mapping[str, str] | None = None
) -> tuple[CPUInfo, list[str]]:
    """The CPU of this machine and notes on what could not be told.

    ``cpuinfo`` is the text of ``/proc/cpuinfo`` (Linux), ``sysctl`` the parsed ``sysctl`` values (macOS).
    Cores are capped by the CPUs this process may run on (a container's cpuset).
    """
    notes: list[str] = []
    arch = normalize_arch(platform.machine())
    model: str | None = None
    features: tuple[str, ...] = ()
    if cpuinfo is not None:
        facts = parse_cpuinfo(cpuinfo)
        model, features = facts.model, facts.features
    elif sysctl is not None:
        model = sysctl.get("machdep.cpu.brand_string")
        features = sysctl_features(sysctl)
        if sysctl.get("hw.optional.arm64") == "1" and arch != "arm64":
            notes.append("Python runs under Rosetta 2 on an Apple Silicon Mac: native arm64 Python is much faster.")
            arch = "arm64"
    if system == "linux" and cpuinfo is None:
        notes.append("/proc/cpuinfo could not be read: the CPU's SIMD features are unknown.")
    model = model or platform.processor() or "unknown CPU"
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    usable = _usable_cpus()
    if usable is not None and usable < logical:
        notes.append(f"This process may run on {usable} of the machine's {logical} logical CPUs (CPU affinity).")
        logical, physical = usable, min(physical, usable)
    return CPUInfo(model, arch, physical, logical, features), notes


def _usable_cpus() -> int | None:
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is None:
        return None
    try:
        return len(getaffinity(0)) or None
    except OSError:
        return None
