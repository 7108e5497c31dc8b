"""What RPC workers offer and how the layers follow it: real ``localinfer rpc`` workers on 127.0.0.1 capped with
``--mem`` at 1 GiB and 3 GiB, asked by ``hw --plan --rpc`` and loaded onto by ``serve --rpc``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from localinfer.backends.llamacpp.rpc.wire import device_memory, probe
from localinfer.errors import LocalInferError
from localinfer.models.store import Manifest
from tests.app.commands.rpc_workers import cli, stop_worker
from tests.app.server.conftest import free_port, serving
from tests.app.test_cli import localinfer

pytestmark = pytest.mark.model

GiB = 1 << 30
# SmolLM2's 30 layers and its output, shared 1:3: llama.cpp gives a device the layers whose index over 31 falls
# below its running share
MAP = "layers 0-7 on RPC0, 8-29 and the output on RPC1"


def _start_capped_worker(home: Path, log: Path, mem: str) -> tuple[subprocess.Popen[bytes], str]:
    """A ``localinfer rpc --mem MEM`` on a free port, once it answers the handshake; its address."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            cli("rpc", "--port", str(port), "--threads", "1", "--mem", mem, home=home),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"127.0.0.1:{port}"
    while True:  # until it answers (or dies)
        if process.poll() is not None:
            raise RuntimeError(f"worker exited with {process.returncode}:\n{log.read_text()}")
        try:
            probe(endpoint, timeout=1)
            return process, endpoint
        except LocalInferError:
            with suppress(subprocess.TimeoutExpired):  # waits on the worker itself: ends early if it dies
                process.wait(timeout=0.1)


@contextmanager
def _capped_workers(folder: Path, *mems: str) -> Iterator[list[str]]:
    """Workers offering ``mems`` each, stopped when the block ends; their addresses."""
    started = [_start_capped_worker(folder, folder / f"worker-{mem}.log", mem) for mem in mems]
    try:
        yield [endpoint for _, endpoint in started]
    finally:
        for process, _ in started:
            if process.poll() is None:
                stop_worker(process)


@pytest.fixture(scope="module")
def capped_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two workers offering 1 GiB and 3 GiB."""
    with _capped_workers(tmp_path_factory.mktemp("rpc-capped"), "1G", "3072") as endpoints:
        yield endpoints


def _plan_lines(test_home: Path, *args: str) -> list[str]:
    done = localinfer("hw", "--plan", *args, home=test_home, timeout=120)
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines()]


def test_a_worker_offers_no_more_memory_than_its_mem(capped_workers: list[str]) -> None:
    assert device_memory(capped_workers[0]) == [(GiB, GiB)]
    assert device_memory(capped_workers[1]) == [(3 * GiB, 3 * GiB)]


def test_hw_plan_shares_the_layers_by_the_memory_each_worker_offers(
    capped_workers: list[str], test_home: Path, smollm2: Manifest
) -> None:
    lines = _plan_lines(test_home, smollm2.name, "--rpc", ",".join(capped_workers))
    assert "- 31 of 31 layers (all) over RPC0, RPC1, shared by the memory each reports free" in lines
    first, second = capped_workers
    assert (f"- {MAP} (RPC0 = {first} (1024 MiB free, share 25%); RPC1 = {second} (3072 MiB free, share 75%))") in lines


def test_hw_plan_follows_a_tensor_split_over_the_memory(
    capped_workers: list[str], test_home: Path, smollm2: Manifest
) -> None:
    lines = _plan_lines(test_home, smollm2.name, "--rpc", ",".join(capped_workers), "--tensor-split", "1,1")
    assert any(line.startswith("- layers 0-15 on RPC0, 16-29 and the output on RPC1 (") for line in lines)


def test_the_load_log_cuts_the_layers_as_hw_plan_said(
    capped_workers: list[str], test_home: Path, smollm2: Manifest, tmp_path: Path
) -> None:
    rpc = ",".join(capped_workers)
    planned = next(line for line in _plan_lines(test_home, smollm2.name, "--rpc", rpc) if line.startswith("- layers"))
    with serving(smollm2.name, test_home, tmp_path, "--ctx-size", "512", "--rpc", rpc) as server:
        body = {"model": smollm2.name, "prompt": "Hi", "max_tokens": 1}
        assert httpx.post(f"{server.url}/v1/completions", json=body, timeout=300).status_code == 200  # loaded
        loaded = next(line for line in server.output().splitlines() if MAP in line)
    assert planned.removeprefix("- ") in loaded  # the same map, the same shares, the same memory


def test_hw_plan_names_a_worker_it_cannot_reach(test_home: Path, smollm2: Manifest) -> None:
    port = free_port()
    done = localinfer("hw", "--plan", smollm2.name, "--rpc", f"127.0.0.1:{port}", home=test_home, timeout=120)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"localinfer: RPC worker 127.0.0.1:{port}: cannot connect")
    assert lines[1] == f"hint: start it there: localinfer rpc --host ADDRESS --port {port}"
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def small_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two workers offering 300 MiB and 200 MiB: room for SmolLM2's last layer and output, not all of it."""
    with _capped_workers(tmp_path_factory.mktemp("rpc-small"), "300M", "200M") as endpoints:
        yield endpoints


def test_serve_keeps_on_the_cpu_the_layers_the_workers_memory_cannot_hold_as_hw_plan_said(
    small_workers: list[str], test_home: Path, smollm2: Manifest, tmp_path: Path
) -> None:
    rpc, small = ",".join(small_workers), ("--ctx-size", "512", "--parallel", "1")
    planned = next(
        line
        for line in _plan_lines(test_home, smollm2.name, "--rpc", rpc, "--ctx", "512", "--parallel", "1")
        if line.startswith("- layers")
    )
    assert planned.startswith("- layers 0-28 on CPU, 29 and the output on RPC0 (")  # the rest stays here
    with serving(smollm2.name, test_home, tmp_path, *small, "--rpc", rpc) as server:
        body = {"model": smollm2.name, "prompt": "Hi", "max_tokens": 1}
        assert httpx.post(f"{server.url}/v1/completions", json=body, timeout=300).status_code == 200  # loaded
        loaded = next(line for line in server.output().splitlines() if "rpc.child" in line and "layers" in line)
    assert planned.removeprefix("- ") in loaded
