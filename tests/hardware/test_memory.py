"""Memory capped by cgroup v1 and v2 limits, from recorded cgroup files laid out in a fake root."""

from __future__ import annotations

import shutil
from pathlib import Path

from localinfer.hardware.memory import (
    CgroupMemory,
    cap_memory,
    detect_memory,
    parse_cgroup,
    parse_cgroup_limit,
    parse_proc_cgroup,
    read_cgroup,
)
from localinfer.hardware.profile import GiB
from tests.hardware.data import DATA, recorded


def fake_root(tmp_path: Path, recorded_dir: str, cgroup_dir: str, proc_self_cgroup: str) -> Path:
    """A filesystem root whose ``sys/fs/cgroup/<cgroup_dir>`` holds the recorded files of ``recorded_dir``."""
    shutil.copytree(DATA / recorded_dir, tmp_path / "sys/fs/cgroup" / cgroup_dir)
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(proc_self_cgroup)
    return tmp_path


def test_v2_max_means_no_limit() -> None:
    assert parse_cgroup_limit("max\n") is None


def test_v1_unlimited_is_no_limit() -> None:
    assert parse_cgroup_limit(recorded("cgroup_v1_unlimited/memory.limit_in_bytes")) is None


def test_v2_limit_and_working_set_leave_out_inactive_page_cache() -> None:
    cgroup = parse_cgroup(
        recorded("cgroup_v2/memory.max"), recorded("cgroup_v2/memory.current"), recorded("cgroup_v2/memory.stat")
    )
    assert cgroup == CgroupMemory(limit=8 * GiB, usage=3 * GiB - 1 * GiB)


def test_v1_limit_and_working_set_use_total_inactive_file() -> None:
    cgroup = parse_cgroup(
        recorded("cgroup_v1/memory.limit_in_bytes"),
        recorded("cgroup_v1/memory.usage_in_bytes"),
        recorded("cgroup_v1/memory.stat"),
        v1=True,
    )
    assert cgroup == CgroupMemory(limit=4 * GiB, usage=2 * GiB - GiB // 2)


def test_proc_self_cgroup_maps_controllers_to_paths() -> None:
    paths = parse_proc_cgroup("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/user.slice/app.scope\n")
    assert paths == {
        "memory": "/docker/abc",
        "cpu": "/docker/abc",
        "cpuacct": "/docker/abc",
        "": "/user.slice/app.scope",
    }


def test_a_container_sees_its_v2_limit_at_the_mount_root(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "cgroup_v2", "", "0::/\n")
    assert read_cgroup(root) == CgroupMemory(limit=8 * GiB, usage=2 * GiB)


def test_the_host_view_finds_the_v2_cgroup_by_its_path_and_takes_the_smallest_ancestor_limit(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "cgroup_v2", "system.slice/app.service", "0::/system.slice/app.service\n")
    (root / "sys/fs/cgroup/system.slice/memory.max").write_text(f"{6 * GiB}\n")
    assert read_cgroup(root) == CgroupMemory(limit=6 * GiB, usage=2 * GiB)


def test_a_v1_cgroup_is_read_when_there_is_no_v2_memory_controller(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "cgroup_v1", "memory/docker/abc", "12:memory:/docker/abc\n0::/\n")
    assert read_cgroup(root) == CgroupMemory(limit=4 * GiB, usage=2 * GiB - GiB // 2)


def test_no_cgroup_files_means_no_cgroup(tmp_path: Path) -> None:
    assert read_cgroup(tmp_path) is None


def test_a_limit_below_ram_caps_total_and_available() -> None:
    memory = cap_memory(32 * GiB, 30 * GiB, CgroupMemory(limit=8 * GiB, usage=2 * GiB))
    assert (memory.total, memory.available, memory.cgroup_limit) == (8 * GiB, 6 * GiB, 8 * GiB)


def test_available_stays_below_the_machines_available_memory() -> None:
    memory = cap_memory(32 * GiB, 3 * GiB, CgroupMemory(limit=8 * GiB, usage=2 * GiB))
    assert memory.available == 3 * GiB


def test_a_limit_above_ram_is_not_recorded() -> None:
    memory = cap_memory(16 * GiB, 12 * GiB, CgroupMemory(limit=64 * GiB, usage=1 * GiB))
    assert (memory.total, memory.available, memory.cgroup_limit) == (16 * GiB, 12 * GiB, None)


def test_detect_memory_caps_psutils_figures_by_the_fake_roots_limit(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "cgroup_v2", "", "0::/\n")
    memory, notes = detect_memory(root)
    assert memory.total <= 8 * GiB and 0 < memory.available <= memory.total
    assert notes == []


def test_detect_memory_on_this_machine_reports_ram() -> None:
    memory, _ = detect_memory()
    assert memory.total > 0 and 0 < memory.available <= memory.total
