"""``detect()`` on this machine (a CPU-only Linux box with llama-cpp-python and without vLLM), and its
behaviour when probes hang or the environment hides GPUs."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from localinfer.hardware.cpu import normalize_arch
from localinfer.hardware.detect import detect, os_name, parse_os_release
from localinfer.hardware.profile import HardwareProfile
from tests.hardware.data import DATA

needs_linux = pytest.mark.skipif(sys.platform != "linux", reason="nvidia-smi is looked for on Linux and Windows")


@pytest.fixture(scope="module")
def profile() -> HardwareProfile:
    return detect()


def test_detect_reports_this_machines_cpu_and_memory(profile: HardwareProfile) -> None:
    assert profile.os == os_name(platform.system())
    assert profile.os_version
    assert profile.cpu.arch == normalize_arch(platform.machine())
    assert 1 <= profile.cpu.physical_cores <= profile.cpu.logical_cores
    assert profile.memory.total > 0
    assert 0 < profile.memory.available <= profile.memory.total


def test_detect_finds_no_gpu_on_this_cpu_only_machine(profile: HardwareProfile) -> None:
    assert profile.gpus == ()


def test_llama_cpp_is_available_here_and_vllm_is_not_with_a_reason(profile: HardwareProfile) -> None:
    llama = profile.backend("llamacpp")
    assert llama.available and llama.version
    vllm = profile.backend("vllm")
    assert not vllm.available
    assert "vllm" in vllm.reason
    assert [b.name for b in profile.backends] == ["llamacpp", "onnx", "vllm", "sglang", "tgi", "trtllm"]


def test_every_engine_process_is_listed_here_as_not_installed_with_how_to_get_it(profile: HardwareProfile) -> None:
    reasons = {b.name: b.reason for b in profile.backends if not b.available}
    assert reasons["sglang"] == "sglang is not installed (pip install 'localinfer[sglang]', on Linux with a CUDA GPU)"
    assert reasons["tgi"].startswith("text-generation-launcher is not installed (run TGI's container")
    assert reasons["trtllm"].startswith("trtllm-serve is not installed (pip install tensorrt-llm --extra-index-url")


def test_the_profile_round_trips_through_json(profile: HardwareProfile) -> None:
    assert HardwareProfile.from_json(json.loads(json.dumps(profile.to_json()))) == profile


def hang(name: str) -> Sequence[str]:
    return [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_hanging_probe_is_cut_off_and_reported_in_notes() -> None:
    started = time.monotonic()
    profile = detect(timeout=0.5, probe_command=hang)
    assert time.monotonic() - started < 10
    assert any("llamacpp probe" in note and "did not answer within 0.5 s" in note for note in profile.notes)
    llama = profile.backend("llamacpp")
    assert llama.available and not llama.gpu_offload  # installed; whether it can offload is unknown


def test_a_crashing_probe_makes_its_backend_unavailable_with_the_reason() -> None:
    def crash(name: str) -> Sequence[str]:
        return [sys.executable, "-c", "import sys; sys.exit('Illegal instruction')"]

    llama = detect(timeout=10, probe_command=crash).backend("llamacpp")
    assert not llama.available
    assert "does not load" in llama.reason and "Illegal instruction" in llama.reason


def test_detect_never_raises_with_an_empty_environment() -> None:
    profile = detect(environ={}, timeout=10)
    assert profile.memory.total > 0


def fake_nvidia_smi(folder: Path, script: str) -> dict[str, str]:
    """An environment whose PATH starts with an ``nvidia-smi`` that runs the shell ``script``."""
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{script}\n")
    smi.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


@needs_linux
def test_nvidia_smis_gpus_are_listed_as_cuda_visible_devices_shows_them(tmp_path: Path) -> None:
    environ = fake_nvidia_smi(tmp_path / "bin", f"cat '{DATA / 'nvidia_smi_2gpus.csv'}'")
    profile = detect(environ={**environ, "CUDA_VISIBLE_DEVICES": "1"})
    assert [(g.index, g.name, g.compute_capability) for g in profile.gpus] == [(0, "NVIDIA GeForce RTX 3090", (8, 6))]
    (gpu,) = profile.gpus
    assert (gpu.vendor, gpu.api, gpu.source, gpu.driver) == ("nvidia", "cuda", "nvidia-smi", "550.54.15")
    assert any("hides 1 of 2" in note for note in profile.notes)
    assert len(detect(environ=environ).gpus) == 2
    assert detect(environ={**environ, "CUDA_VISIBLE_DEVICES": ""}).gpus == ()


@needs_linux
def test_a_hanging_nvidia_smi_is_cut_off_and_reported(tmp_path: Path) -> None:
    environ = fake_nvidia_smi(tmp_path / "bin", "sleep 60")
    started = time.monotonic()
    profile = detect(environ=environ, timeout=0.5)
    assert time.monotonic() - started < 10
    assert profile.gpus == ()
    assert any("nvidia-smi" in note and "did not answer within 0.5 s" in note for note in profile.notes)


def test_os_release_gives_the_distributions_pretty_name() -> None:
    text = 'NAME="Ubuntu"\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n'
    assert parse_os_release(text) == "Ubuntu 22.04.4 LTS"
    assert parse_os_release('NAME="Alpine Linux"\nVERSION_ID=3.19.1\n') == "Alpine Linux 3.19.1"
    assert parse_os_release("") is None


@pytest.mark.parametrize(("system", "name"), [("Linux", "linux"), ("Darwin", "darwin"), ("Windows", "windows")])
def test_os_names(system: str, name: str) -> None:
    assert os_name(system) == name
    assert os_name("FreeBSD") == "other"
