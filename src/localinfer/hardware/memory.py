"""Memory: the machine's RAM, capped by the container's cgroup limit (v2 ``memory.max``, v1 ``limit_in_bytes``).

Parsers take text and readers take a filesystem root, so tests build a fake ``/sys/fs/cgroup`` in a folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

from localinfer.hardware.profile import MemoryInfo

# cgroup v1 writes "no limit" as the largest page-aligned 63-bit number; anything this large is no limit.
_NO_LIMIT_ABOVE = 1 << 60

_V2 = ("memory.max", "memory.current", "inactive_file")
_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


@dataclass(frozen=True)
class CgroupMemory:
    limit: int | None  # bytes; None when the cgroup sets none
    usage: int | None = None  # bytes in use by the cgroup, less reclaimable page cache; None when unreadable


def parse_cgroup_limit(text: str) -> int | None:
    """A cgroup memory limit in bytes: ``max`` (v2), a huge v1 value or anything unreadable is no limit."""
    value = text.strip()
    if not value.isdigit():
        return None
    limit = int(value)
    return limit if 0 < limit < _NO_LIMIT_ABOVE else None


def parse_cgroup(limit: str, usage: str | None = None, stat: str | None = None, *, v1: bool = False) -> CgroupMemory:
    """A cgroup's limit and working-set usage from the texts of its limit, usage and ``memory.stat`` files.

    Usage counts page cache, which the kernel reclaims before it kills: inactive file pages (from ``stat``) are
    not counted as used, as ``docker stats`` and the kubelet do.
    """
    used = int(usage.strip()) if usage is not None and usage.strip().isdigit() else None
    if used is not None and stat is not None:
        inactive = parse_memory_stat(stat).get(_V1[2] if v1 else _V2[2], 0)
        used = max(used - inactive, 0)
    return CgroupMemory(parse_cgroup_limit(limit), used)


def parse_memory_stat(text: str) -> dict[str, int]:
    """``memory.stat`` (``name value`` lines) as a dict of integers."""
    stats: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            stats[name] = int(value)
    return stats


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as {controller: path}; the v2 unified hierarchy's controller is ``""``."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                paths.setdefault(controller, parts[2])
    return paths


def read_cgroup(root: Path = Path("/")) -> CgroupMemory | None:
    """The memory limit of this process's cgroup under ``root`` (v2, else v1), or None when there is no cgroup
    memory controller to read. The limit is the smallest of the cgroup's and its ancestors'."""
    mount = root / "sys/fs/cgroup"
    paths = parse_proc_cgroup(_read(root / "proc/self/cgroup") or "")
    for base, own, files, v1 in (
        (mount, paths.get("", "/"), _V2, False),
        (mount / "memory", paths.get("memory", "/"), _V1, True),
    ):
        found = _read_hierarchy(base, own, files, v1=v1)
        if found is not None:
            return found
    return None


def cap_memory(total: int, available: int, cgroup: CgroupMemory | None) -> MemoryInfo:
    """RAM as a process here may use it: ``total`` and ``available`` capped by the cgroup's limit, which is
    recorded when it is below ``total``."""
    if cgroup is None or cgroup.limit is None or cgroup.limit >= total:
        return MemoryInfo(total=total, available=available)
    free_in_cgroup = cgroup.limit - cgroup.usage if cgroup.usage is not None else cgroup.limit
    return MemoryInfo(
        total=cgroup.limit,
        available=max(0, min(available, free_in_cgroup)),
        cgroup_limit=cgroup.limit,
    )


def detect_memory(cgroup_root: Path | None = Path("/")) -> tuple[MemoryInfo, list[str]]:
    """This machine's memory (psutil), capped by the cgroup limit under ``cgroup_root`` (None: no cgroups, as
    off Linux); notes on what failed."""
    notes: list[str] = []
    vm = psutil.virtual_memory()
    cgroup: CgroupMemory | None = None
    try:
        cgroup = read_cgroup(cgroup_root) if cgroup_root is not None else None
    except (OSError, ValueError) as exc:
        notes.append(f"The cgroup memory limit could not be read ({exc}): memory is not capped by it.")
    return cap_memory(int(vm.total), int(vm.available), cgroup), notes


def _read_hierarchy(base: Path, own: str, files: tuple[str, str, str], *, v1: bool) -> CgroupMemory | None:
    """The cgroup at ``base``/``own``: the smallest limit from it up to ``base``, and its own usage. Folders that
    are not mounted here (a container sees its own cgroup at ``base``) are skipped."""
    limit_file, usage_file, _ = files
    found: CgroupMemory | None = None
    limits: list[int] = []
    folder = base / own.strip("/")
    for current in (folder, *folder.parents):
        limit_text = _read(current / limit_file)
        if limit_text is not None:
            cgroup = parse_cgroup(limit_text, _read(current / usage_file), _read(current / "memory.stat"), v1=v1)
            found = found or cgroup
            if cgroup.limit is not None:
                limits.append(cgroup.limit)
        if current == base:
            break
    if found is None:
        return None
    return CgroupMemory(min(limits, default=None), found.usage)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
