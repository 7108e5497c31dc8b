"""The child ``localinfer serve`` that runs a model placed on RPC workers, with real ``localinfer rpc`` workers: the
stall check never takes a busy worker for a lost one, the child is given the model's file (so a GGUF named by its
path serves), options it cannot be given are refused and those it can are carried, and an unload while the child
restarts leaves no child behind."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.rpc.child import RpcChildBackend
from localinfer.backends.llamacpp.rpc.watch import WorkerWatch
from localinfer.errors import LocalInferError
from localinfer.models.store import Manifest
from localinfer.types import GenerationOptions, GenerationRequest, SamplingParams
from tests.app.commands.rpc_workers import held, start_worker, stop_worker
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

CHECKS = 5  # stall checks in a row: a worker's accept queue holds two connections


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[Any, int]]:
    process, port = start_worker(tmp_path, tmp_path / "worker.log")
    try:
        yield process, port
    finally:
        if process.poll() is None:
            stop_worker(process)


def test_a_worker_serving_the_child_is_never_taken_for_gone(worker: tuple[Any, int]) -> None:
    endpoint = f"127.0.0.1:{worker[1]}"
    with held(worker[1]):
        watch = WorkerWatch([endpoint])
        watch.hold()
        try:
            assert [watch.gone() for _ in range(CHECKS)] == [{}] * CHECKS
        finally:
            watch.close()


def test_a_worker_killed_while_it_serves_the_child_is_taken_for_gone(worker: tuple[Any, int]) -> None:
    process, port = worker
    endpoint = f"127.0.0.1:{port}"
    with held(port):
        watch = WorkerWatch([endpoint])
        watch.hold()
        try:
            assert watch.gone() == {}
            process.send_signal(signal.SIGKILL)
            process.wait()
            assert list(watch.gone()) == [endpoint]
        finally:
            watch.close()


@pytest.fixture(scope="module")
def by_path(
    smollm2_fim: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, str]]:
    """SmolLM2 (with FIM tokens) served by the path of a GGUF file that is no registered name, on one worker."""
    folder = tmp_path_factory.mktemp("rpc-by-path")
    link = folder / "by-path.gguf"
    link.symlink_to(smollm2_fim.path)
    process, port = start_worker(folder, folder / "worker.log")
    try:
        with serving(str(link), test_home, folder, "--ctx-size", "1024", "--rpc", f"127.0.0.1:{port}") as server:
            yield server, f"127.0.0.1:{port}"
    finally:
        stop_worker(process)


def test_a_gguf_named_by_its_path_answers_through_the_child(by_path: tuple[Server, str]) -> None:
    server, endpoint = by_path
    reply = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "by-path", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
        timeout=300,
    )
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"]
    workers = httpx.get(f"{server.url}/health", timeout=30).json()["rpc_workers"]
    assert workers == [{"endpoint": endpoint, "state": "ok", "models": ["by-path"]}]


def test_fill_in_the_middle_is_carried_to_the_child(by_path: tuple[Server, str]) -> None:
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n", "n_predict": 8, "temperature": 0}
    reply = httpx.post(f"{by_path[0].url}/infill", json=body, timeout=300)
    assert reply.status_code == 200
    assert reply.json()["tokens_predicted"] > 0


def test_the_infill_sampler_is_refused_not_dropped(by_path: tuple[Server, str]) -> None:
    samplers = ["top_k", "top_p", "min_p", "infill", "temperature"]
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n", "n_predict": 8, "samplers": samplers}
    reply = httpx.post(f"{by_path[0].url}/infill", json=body, timeout=300)
    assert reply.status_code == 400
    assert reply.json()["error"]["message"].startswith("the infill sampler is not carried to a model served over RPC")


def _events(server: Server, **fields: Any) -> list[dict[str, Any]]:
    body = {"prompt": "The sky is", "n_predict": 4, "temperature": 0, "stream": True, **fields}
    with httpx.stream("POST", f"{server.url}/completion", json=body, timeout=300) as response:
        assert response.status_code == 200
        return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


def test_timings_per_token_are_carried_from_the_child(by_path: tuple[Server, str]) -> None:
    pieces = [e for e in _events(by_path[0], timings_per_token=True) if not e["stop"]]
    assert pieces
    assert all(piece["timings"]["predicted_n"] >= 1 for piece in pieces)


def test_the_prompts_progress_is_carried_from_the_child(by_path: tuple[Server, str]) -> None:
    progress = [e["prompt_progress"] for e in _events(by_path[0], return_progress=True) if "prompt_progress" in e]
    assert progress
    assert progress[-1]["processed"] == progress[-1]["total"] > 0


def _child_servers(model: Path) -> list[psutil.Process]:
    """The ``localinfer serve`` processes of ``model``'s file this test process started that still run."""
    found = []
    for process in psutil.Process().children():
        try:
            argv = process.cmdline()
            if "serve" in argv and str(model) in argv and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:  # exited meanwhile
            continue
    return found


async def test_an_unload_while_the_child_restarts_leaves_no_child(
    smollm2: Manifest, test_home: Path, tmp_path: Path, worker: tuple[Any, int]
) -> None:
    backend = RpcChildBackend(home=test_home, log_dir=tmp_path)
    spec = LoadSpec(path=smollm2.path, name=smollm2.name, ctx_size=512, gpu_layers=99, rpc=(f"127.0.0.1:{worker[1]}",))
    await backend.load(spec)
    [first] = _child_servers(smollm2.path)
    first.kill()  # the child exits: the next request starts it again
    first.wait()
    request = GenerationRequest("r1", "Hi", GenerationOptions(sampling=SamplingParams(temperature=0), max_tokens=4))
    restart = asyncio.ensure_future(anext(backend.generate(request)))
    while not _child_servers(smollm2.path):  # until the new child runs (then it loads the model), or the restart fails
        await asyncio.wait({restart}, timeout=0.05)
        assert not restart.done(), restart
    await backend.unload()
    with pytest.raises(LocalInferError):
        await restart
    assert _child_servers(smollm2.path) == []
