"""llama-server's device flags on ``localinfer serve``: ``--list-devices`` lists what llama.cpp can offload to and
exits, ``--device none`` keeps a model on the CPU, ``--device NAME`` with a name llama.cpp does not know is one line
with a hint, and ``--no-kv-offload`` / ``--no-op-offload`` start a server that answers as without them. On a CPU
build; what they change on a GPU is measured by bench/gpu_check.sh (docs/benchmarks.md). A GPU build's "no CUDA
device" is said at INFO, not as an error."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from localinfer.backends.llamacpp.devices import known_names, log_level, parse_devices, resolve
from localinfer.errors import ConfigError
from localinfer.models.store import Manifest
from tests.app.server.conftest import serving

PROMPT = {"prompt": "The capital of France is", "n_predict": 6, "temperature": 0}


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCALINFER_HOME": str(home), "LOCALINFER_CONFIG": os.devnull}
    command = [sys.executable, "-m", "localinfer.app.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_device_lists_are_read_as_llama_server_reads_them() -> None:
    assert parse_devices("") is None
    assert parse_devices("none") == parse_devices("NONE") == ()
    assert parse_devices("CUDA0, CUDA1") == ("CUDA0", "CUDA1")
    with pytest.raises(ConfigError, match="not a list of devices"):
        parse_devices("CUDA0,,CUDA1")


def test_a_device_llama_cpp_does_not_know_is_refused_naming_those_it_knows() -> None:
    with pytest.raises(ConfigError, match="no device named 'CUDA7'") as caught:
        resolve(("CUDA7",))
    assert "--list-devices" in caught.value.hint
    assert len(resolve(())) == 1  # none: the list holds only its end


def test_a_gpu_build_finding_no_gpu_is_said_at_info_and_other_errors_stay_errors() -> None:
    found = "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected"
    assert log_level(4, found) == logging.INFO
    assert log_level(4, "llama_model_load: error loading model") == logging.ERROR
    assert log_level(3, "a warning") == logging.WARNING
    assert log_level(2, "some info") == logging.DEBUG


@pytest.mark.model
def test_list_devices_prints_the_devices_and_exits(test_home: Path) -> None:
    done = cli(test_home, "serve", "--list-devices")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Available devices:"
    names = known_names()
    assert len(lines) == 1 + max(len(names), 1)
    assert all(any(line.strip().startswith(f"{name}:") for line in lines) for name in names)


@pytest.mark.model
def test_an_unknown_device_stops_serve_with_one_line_and_a_hint(test_home: Path, smollm2: Manifest) -> None:
    done = cli(test_home, "serve", smollm2.name, "--device", "CUDA7", "--port", "1")
    assert done.returncode != 0
    assert "no device named 'CUDA7'" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.model
def test_device_none_and_no_offload_flags_serve_the_same_text(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    texts = []
    for flags in ((), ("--device", "none", "--no-kv-offload", "--no-op-offload")):
        with serving(smollm2.name, test_home, tmp_path, "--ctx-size", "512", *flags) as server:
            answer = httpx.post(f"{server.url}/completion", json=PROMPT, timeout=120)
            assert answer.status_code == 200, answer.text
            texts.append(answer.json()["content"])
            assert "ERROR" not in server.output()
    assert texts[0] == texts[1] and texts[0].strip()
