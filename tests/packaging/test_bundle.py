"""The packaged app (packaging/build), run where there is no Python: an environment emptied with ``env -i``, a
PATH with no python on it, a fresh HOME, and the PyPI index pointed at a closed port.

The one-file and one-folder forms answer ``--version``, ``hw --json``, ``ls``, serve a GGUF path to the official
openai client, and open the chat screen in a real terminal; the one file carrying the starter serves it with an
empty HOME, unpacking it once; with the AVX-512 variants of llama.cpp's CPU backend ruled out, the AVX2 one is
loaded and scores the text as the default one does. A shared library or data file missing from the bundle fails
these tests with its name (the command's stderr is in the failure).

The bundles are built once per session (packaging/build caches them by their inputs' hash): the one folder, and
the one file carrying the starter, which stands for the plain one file too (they differ by the model only).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from localinfer import __version__
from localinfer.models.store import Manifest
from tests.app.tui.test_terminal import tmux, wait_for_screen
from tests.capital_answer import CAPITAL_GRAMMAR

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
CLOSED_INDEX = "http://127.0.0.1:9/simple"  # nothing listens on the discard port: no PyPI


def build(*args: str, home: Path | None = None) -> list[Path]:
    env = {**os.environ, **({"LOCALINFER_HOME": str(home)} if home is not None else {})}
    proc = subprocess.run(
        [str(ROOT / "packaging" / "build"), *args], cwd=ROOT, capture_output=True, text=True, timeout=3300, env=env
    )
    assert proc.returncode == 0, f"packaging/build {' '.join(args)} failed:\n{proc.stderr[-4000:]}"
    return [Path(line) for line in proc.stdout.strip().splitlines()[-1:]]


@pytest.fixture(scope="session")
def onedir() -> Path:
    (app,) = build("--onedir")
    return app


@pytest.fixture(scope="session")
def with_starter(test_home: Path, smollm2: Manifest) -> Path:
    """The one file, carrying the starter (built once: the plain one file differs from it only by the model),
    taken from the test home."""
    (app,) = build("--with-model", "smollm2", home=test_home)
    return app


@pytest.fixture(params=["onefile", "onedir"])
def app(request: pytest.FixtureRequest) -> Path:
    fixture = "with_starter" if request.param == "onefile" else "onedir"
    return Path(request.getfixturevalue(fixture))


@pytest.fixture
def bare_env(tmp_path: Path) -> dict[str, str]:
    """What a machine without Python gives the app: a PATH with no python on it, an empty HOME, no network
    index, no localinfer configuration."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    return {
        "PATH": str(bin_dir),
        "HOME": str(home),
        "TERM": "xterm-256color",
        "PIP_INDEX_URL": CLOSED_INDEX,
        "HF_HUB_OFFLINE": "1",
        "LOCALINFER_DISCOVER": "false",
    }


def run(app: Path, *args: str, env: dict[str, str], timeout: float = 120) -> str:
    proc = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), str(app), *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, f"{app.name} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_no_python_is_reachable_from_the_bare_environment(bare_env: dict[str, str]) -> None:
    assert shutil.which("python3", path=bare_env["PATH"]) is None
    assert shutil.which("python", path=bare_env["PATH"]) is None


def test_version_hw_and_ls_answer_without_python(app: Path, bare_env: dict[str, str]) -> None:
    assert run(app, "--version", env=bare_env).strip() == f"localinfer {__version__}"
    hardware = json.loads(run(app, "hw", "--json", env=bare_env))
    llamacpp = next(b for b in hardware["backends"] if b["name"] == "llamacpp")
    assert llamacpp["available"], llamacpp["reason"]
    assert "CPU variant" in llamacpp["reason"], llamacpp["reason"]  # the portable build chose one
    assert run(app, "ls", "--json", env=bare_env).strip() == "[]"


class Server:
    def __init__(self, app: Path, args: list[str], env: dict[str, str], log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), str(app), "serve", *args]
        command += ["--port", str(self.port), "--ctx-size", "1024", "--parallel", "1"]
        self.log = log
        self._log_file = log.open("w")
        self.proc = subprocess.Popen(command, stdout=self._log_file, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the server exited {self.proc.returncode}:\n{self.log.read_text()}"
            with contextlib.suppress(httpx.HTTPError):  # not listening yet
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.3)
        raise AssertionError(f"not healthy after {timeout}s:\n{self.log.read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log_file.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve(app: Path, args: list[str], env: dict[str, str], log: Path) -> Iterator[Server]:
    server = Server(app, args, env, log)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def complete(server: Server, model: str) -> str:
    """SmolLM2's greedy continuation of a fact, through the official openai client, held to a choice of capitals
    (tests/capital_answer.py: the free greedy text differs between CPUs, and the bundle's CPU variants differ)."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=120)
    reply = client.completions.create(
        model=model,
        prompt="The capital of France is",
        max_tokens=6,
        temperature=0,
        extra_body={"grammar": CAPITAL_GRAMMAR},
    )
    return reply.choices[0].text


def test_serve_answers_the_openai_client_on_a_gguf_path(
    app: Path, bare_env: dict[str, str], smollm2: Manifest, tmp_path: Path
) -> None:
    gguf = tmp_path / "SmolLM2.gguf"
    os.link(smollm2.path, gguf)
    with serve(app, [str(gguf)], bare_env, tmp_path / "serve.log") as server:
        assert complete(server, "SmolLM2") == " Paris"


def test_the_app_with_the_starter_inside_serves_it_offline_unpacking_it_once(
    with_starter: Path, bare_env: dict[str, str], smollm2: Manifest, tmp_path: Path
) -> None:
    with serve(with_starter, [], bare_env, tmp_path / "first.log") as server:
        assert complete(server, "smollm2") == " Paris"
    blob = Path(bare_env["HOME"]) / ".local" / "share" / "localinfer" / "models" / "blobs"
    (unpacked,) = list(blob.glob("sha256-*"))
    assert unpacked.name == f"sha256-{smollm2.files[0].sha256}"
    first_unpacked = unpacked.stat().st_mtime_ns
    with serve(with_starter, [], bare_env, tmp_path / "second.log") as server:
        assert complete(server, "smollm2") == " Paris"
    assert unpacked.stat().st_mtime_ns == first_unpacked, "the carried model was unpacked a second time"


def test_without_the_avx512_variants_the_avx2_one_is_loaded_and_scores_the_same(
    app: Path, bare_env: dict[str, str], smollm2: Manifest, tmp_path: Path
) -> None:
    gguf = tmp_path / "SmolLM2.gguf"
    os.link(smollm2.path, gguf)
    restricted = {**bare_env, "LOCALINFER_CPU_VARIANT": "x64,sse42,haswell"}
    llamacpp = next(
        b for b in json.loads(run(app, "hw", "--json", env=restricted))["backends"] if b["name"] == "llamacpp"
    )
    assert "CPU variant haswell" in llamacpp["reason"], llamacpp["reason"]
    args = ["perplexity", str(gguf), "--ctx", "256", "--chunks", "4", "--json"]
    default = json.loads(run(app, *args, env=bare_env))["ppl"]
    avx2 = json.loads(run(app, *args, env=restricted))["ppl"]
    source = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "LOCALINFER_HOME": str(tmp_path / "source-home")},
    )
    from_source = json.loads(source.stdout)["ppl"]
    # The same model and text through other SIMD kernels: the same perplexity up to rounding (here 15.23 from
    # the source install and the AVX-512 variant, 15.28 from the AVX2 one); a broken build is far off.
    assert abs(default - from_source) / from_source < 0.01, (default, from_source)
    assert abs(avx2 - from_source) / from_source < 0.01, (avx2, from_source)


def test_the_app_opens_its_chat_screen_in_a_terminal(with_starter: Path, bare_env: dict[str, str]) -> None:
    name = f"localinfer-bundle-{uuid.uuid4().hex[:8]}"
    env = " ".join(f"{k}={v}" for k, v in bare_env.items())
    command = f"env -i {env} {with_starter}; echo EXITED $?; sleep 30"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", name, "-x", "100", "-y", "30", command],
        check=True,
        env={**os.environ, "TMUX": ""},
    )
    try:
        wait_for_screen(name, "Message (Enter sends", timeout=120)
        wait_for_screen(name, "llamacpp:", timeout=120)  # the status bar: the carried starter is loaded
        tmux("send-keys", "-t", name, "C-q")
        wait_for_screen(name, "EXITED 0", timeout=30)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
