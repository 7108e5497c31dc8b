"""``localinfer rpc`` workers and ``localinfer serve --rpc``: real workers on 127.0.0.1, SmolLM2 split over this
process's CPU and two workers, compared with the same model run locally."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from localinfer.app.commands.rpc import exposure
from localinfer.backends.llamacpp.rpc.wire import RpcWorkerError, parse_endpoints, probe
from localinfer.errors import ConfigError
from localinfer.hardware.layer_split import assign, describe, parse_tensor_split
from localinfer.models.store import Manifest
from tests.app.commands.rpc_workers import cli, start_worker, stop_worker
from tests.app.server.conftest import Server, free_port, serving

pytestmark = pytest.mark.model

PROMPT = [{"role": "user", "content": "Name three colours of the rainbow."}]
SMOLLM2_LAYERS = 30


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    folder = tmp_path_factory.mktemp("rpc-workers")
    started = [start_worker(folder, folder / f"worker-{i}.log") for i in range(2)]
    try:
        yield [port for _, port in started]
    finally:
        for process, _ in started:
            if process.poll() is None:
                stop_worker(process)


@pytest.fixture(scope="module")
def split_server(
    smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory, workers: list[int]
) -> Iterator[Server]:
    """SmolLM2 with its first 11 layers on this machine's CPU and the other 20 and the output over two workers."""
    rpc = ",".join(f"127.0.0.1:{port}" for port in workers)
    log_dir = tmp_path_factory.mktemp("serve-rpc")
    with serving(smollm2.name, test_home, log_dir, "--ctx-size", "1024", "--rpc", rpc, "--gpu-layers", "20") as s:
        yield s


@pytest.fixture(scope="module")
def local_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("serve-local"), "--ctx-size", "1024") as s:
        yield s


def _greedy(server: Server, model: str) -> str:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    reply = client.chat.completions.create(model=model, messages=PROMPT, temperature=0, max_tokens=48, seed=1)  # type: ignore[arg-type]
    return reply.choices[0].message.content or ""


def test_a_model_split_over_two_workers_answers_as_it_does_locally(
    split_server: Server, local_server: Server, smollm2: Manifest
) -> None:
    remote = _greedy(split_server, smollm2.name)
    assert remote
    assert remote == _greedy(local_server, smollm2.name)


def test_the_load_log_says_which_layers_went_to_which_worker(
    split_server: Server, smollm2: Manifest, workers: list[int]
) -> None:
    _greedy(split_server, smollm2.name)  # loaded
    line = next(line for line in split_server.output().splitlines() if "layers 0-10 on CPU" in line)
    assert " on RPC0 (" in line or " on RPC0," in line
    assert "the output on RPC1" in line
    assert f"127.0.0.1:{workers[0]}" in line and f"127.0.0.1:{workers[1]}" in line


def test_ps_shows_the_devices_a_split_model_spans_and_what_each_holds(
    split_server: Server, smollm2: Manifest, workers: list[int], tmp_path: Path
) -> None:
    _greedy(split_server, smollm2.name)  # loaded
    done = subprocess.run(
        cli("ps", "--json", "--url", split_server.url, home=tmp_path), capture_output=True, text=True, timeout=60
    )
    devices = json.loads(done.stdout)[0]["devices"]
    assert [(d["name"], d["where"]) for d in devices] == [
        ("CPU", "local"),
        ("RPC0", f"127.0.0.1:{workers[0]}"),
        ("RPC1", f"127.0.0.1:{workers[1]}"),
    ]
    assert all(d["size_bytes"] > 0 for d in devices)
    table = subprocess.run(cli("ps", "--url", split_server.url, home=tmp_path), capture_output=True, text=True)
    assert table.stdout.splitlines()[0].endswith("DEVICES")
    assert f"RPC1 (127.0.0.1:{workers[1]}) " in table.stdout
    row = table.stdout.splitlines()[1]
    assert "% CPU/RPC" in row and "GPU" not in row  # the workers lend their CPUs here: no GPU anywhere
    assert " layers offloaded)" not in row and " offloaded layers)" in row


def test_health_lists_the_workers_a_loaded_model_is_on(
    split_server: Server, smollm2: Manifest, workers: list[int]
) -> None:
    _greedy(split_server, smollm2.name)  # loaded
    health = httpx.get(f"{split_server.url}/health", timeout=30).json()
    assert health["rpc_workers"] == [
        {"endpoint": f"127.0.0.1:{port}", "state": "ok", "models": [smollm2.name]} for port in workers
    ]


def test_an_unreachable_worker_is_one_line_naming_it(smollm2: Manifest, test_home: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "LOCALINFER_HOME": str(test_home), "LOCALINFER_CONFIG": str(tmp_path / "none.toml")}
    done = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "serve", smollm2.name, "--rpc", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"localinfer: RPC worker 127.0.0.1:{port}: cannot connect")
    assert lines[1].startswith("hint: start it there: localinfer rpc")
    assert "Traceback" not in done.stderr


def test_listening_on_every_address_is_refused_without_the_flag(tmp_path: Path) -> None:
    done = subprocess.run(cli("rpc", "--host", "0.0.0.0", home=tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("localinfer: refusing to listen on every address (0.0.0.0)")
    assert "--i-know-this-is-unauthenticated" in done.stderr


def test_sigterm_stops_a_worker_with_exit_0(tmp_path: Path) -> None:
    process, port = start_worker(tmp_path, tmp_path / "worker.log")
    assert probe(f"127.0.0.1:{port}")[0] >= 1  # it speaks the protocol
    assert stop_worker(process) == 0
    assert "Traceback" not in (tmp_path / "worker.log").read_text()


def test_a_port_that_is_no_worker_is_refused_at_the_handshake() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(RpcWorkerError, match="took the connection but gave no handshake"):
            probe(f"127.0.0.1:{port}", timeout=0.5)  # accepted by the kernel, never answered


def test_a_worker_serving_another_client_is_reported_busy(tmp_path: Path) -> None:
    """A worker serves one client at a time and keeps the next in its backlog: a second server that asks for it
    is told the worker is busy, not that it is down."""
    process, port = start_worker(tmp_path, tmp_path / "worker.log")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as first:  # a hang guard, not a bound
            first.sendall(struct.pack("<BQ", 14, 24) + bytes(24))  # HELLO (command 14, 24 bytes of capabilities)
            assert len(first.recv(64)) > 0  # answered: the worker serves this connection now
            with pytest.raises(RpcWorkerError) as caught:
                probe(f"127.0.0.1:{port}", timeout=0.5)
        assert "busy with another client" in caught.value.message
        assert "Give each server workers of its own" in caught.value.hint
    finally:
        stop_worker(process)


def test_addresses_are_parsed_as_llama_server_takes_them() -> None:
    assert parse_endpoints("10.0.0.2:50052, worker ,10.0.0.2:50052,[::1]:7000") == (
        "10.0.0.2:50052",
        "worker:50052",
        "::1:7000",
    )
    with pytest.raises(ConfigError):
        parse_endpoints("host:99999")
    hosts = ("127.0.0.1", "::1", "[::1]", "localhost", "worker.localhost", "192.168.1.5", "gpu-box", "0.0.0.0", "::")
    assert [exposure(h) for h in hosts] == [
        "loopback",
        "loopback",
        "loopback",
        "loopback",
        "loopback",  # as serve's Host check counts it (RFC 6761)
        "network",
        "network",
        "everywhere",
        "everywhere",
    ]


def test_layers_are_cut_as_llama_cpp_cuts_them() -> None:
    # 30 layers and the output; 20 offloaded: 0-10 stay on the CPU, the offloaded ones shared evenly
    where = assign(SMOLLM2_LAYERS, 20, [1.0, 1.0])
    assert where == [-1] * 11 + [0] * 10 + [1] * 10
    assert describe(where, ["RPC0", "RPC1"]) == "layers 0-10 on CPU, 11-20 on RPC0, 21-29 and the output on RPC1"
    assert assign(4, 5, [3.0, 1.0]) == [0, 0, 0, 0, 1]
    assert parse_tensor_split("3,1") == (3.0, 1.0)
    with pytest.raises(ConfigError):
        parse_tensor_split("0,0")
