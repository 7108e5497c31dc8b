"""A real ``localinfer serve`` in a subprocess on 127.0.0.1, driven by the official openai client."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from localinfer.models.store import Manifest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(
    model: str, home: Path, log_dir: Path, *extra: str, timeout: float = 60.0, env: Mapping[str, str] | None = None
) -> Server:
    """Start ``localinfer serve MODEL`` (no MODEL when ``model`` is empty) with ``home`` (and ``env`` added) and
    wait until /health answers 200."""
    port = free_port()
    log = log_dir / f"server-{port}.log"
    env = {
        **os.environ,
        "LOCALINFER_HOME": str(home),
        "LOCALINFER_CONFIG": str(log_dir / "no-config.toml"),
        **(env or {}),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "localinfer.app.cli",
                "serve",
                *([model] if model else []),
                "--port",
                str(port),
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.output()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    stop_server(server)
    raise RuntimeError(f"server did not become ready:\n{server.output()}")


@contextmanager
def serving(
    model: str, home: Path, log_dir: Path, *extra: str, env: Mapping[str, str] | None = None
) -> Iterator[Server]:
    """A running ``localinfer serve``, stopped when the block ends (a fixture's whole scope)."""
    server = start_server(model, home, log_dir, *extra, env=env)
    try:
        yield server
    finally:
        stop_server(server)


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="session")
def smollm2_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """SmolLM2 served by its registered name, with a 2048-token context. Its names are strict: a name nobody serves
    is a 404, as on a server of several models (the tests of each dialect's 404 use it); a server of one model that
    answers any name with its model, as llama-server does, is test_one_model_names.py's."""
    log_dir = tmp_path_factory.mktemp("serve-smollm2")
    with serving(smollm2.name, test_home, log_dir, "--ctx-size", "2048", "--strict-model-names") as server:
        yield server


@pytest.fixture(scope="session")
def client(smollm2_server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{smollm2_server.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def model_name(smollm2: Manifest) -> str:
    return smollm2.name


def tokens_predicted(url: str, api_key: str | None = None) -> int:
    """llama-server's ``llamacpp:tokens_predicted_total`` on the server at ``url``: the tokens sampled by requests
    that have ended, a request a client left included. A test compares it before and after, instead of timing."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=30).text
    line = next(line for line in text.splitlines() if line.startswith("llamacpp:tokens_predicted_total"))
    return int(float(line.split()[-1]))


@pytest.fixture(scope="session")
def vision_server(
    smollm2: Manifest, smollm2_mmproj: Path, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """SmolLM2 with the test projector (``--mmproj``), two slots of 2048 tokens, image URLs allowed, a slot folder
    (for the slots' erase)."""
    log_dir = tmp_path_factory.mktemp("serve-vision")
    extra = ("--ctx-size", "2048", "--parallel", "2", "--mmproj", str(smollm2_mmproj), "--allow-image-urls")
    with serving(smollm2.name, test_home, log_dir, *extra, "--slot-save-path", str(log_dir)) as server:
        yield server
