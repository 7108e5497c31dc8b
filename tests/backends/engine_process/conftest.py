"""Stand-in engines for the engine launcher and proxy: localinfer's own server (started as an engine would be)
and a tiny script that records its command line, and helpers to see which processes are left. Stand-ins started
by each engine's own command line are in ``standins.py``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import psutil
import pytest
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from localinfer.app.server.relay import relay_route
from localinfer.backends.engine_process.launcher import EngineProcess, openai_server
from localinfer.backends.engine_process.proxy import EngineProxy
from localinfer.models.store import Manifest

# Serves /health and /v1/models (the latter only with the key it was given); records its argv to
# $STANDIN_ARGV_FILE; with $STANDIN_SPAWN starts two sleeping children, one of them in a session of its own;
# with $STANDIN_IGNORE_TERM ignores SIGTERM.
STANDIN_SCRIPT = """
import http.server, json, os, signal, subprocess, sys
args = sys.argv[1:]
if os.environ.get("STANDIN_ARGV_FILE"):
    with open(os.environ["STANDIN_ARGV_FILE"], "w") as f:
        json.dump(args, f)
port, key = int(args[args.index("--port") + 1]), os.environ["VLLM_API_KEY"]
if os.environ.get("STANDIN_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("STANDIN_SPAWN"):
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    subprocess.Popen(sleeper)
    subprocess.Popen(sleeper, start_new_session=True)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/v1") and self.headers.get("Authorization") != "Bearer " + key:
            status, body = 401, {"error": {"message": "wrong key"}}
        else:
            status, body = 200, {"object": "list", "data": [{"id": "standin", "max_model_len": 1234}]}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

print("standin listening", flush=True)
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


STANDIN_KEY_ENV = "VLLM_API_KEY"  # where the recording stand-in reads its key


@pytest.fixture
def standin(tmp_path: Path) -> list[str]:
    """The command of the recording stand-in engine."""
    script = tmp_path / "standin.py"
    script.write_text(STANDIN_SCRIPT)
    return [sys.executable, str(script)]


def standin_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment for a stand-in engine: an empty localinfer home, no discovery, no config file."""
    return {
        **os.environ,
        "LOCALINFER_HOME": str(tmp_path / "home"),
        "LOCALINFER_DISCOVER": "false",
        "LOCALINFER_CONFIG": str(tmp_path / "no-config.toml"),
        **extra,
    }


@pytest.fixture(scope="session")
def smollm2_gguf(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's file under a ``.gguf`` name, which ``localinfer serve`` takes as a path."""
    link = tmp_path_factory.mktemp("smollm2") / "smollm2.gguf"
    link.symlink_to(smollm2.path)
    return link


def write_trtllm_engine(folder: Path) -> Path:
    """A built TensorRT-LLM engine folder as ``trtllm-build`` writes one (a ``config.json`` stating the build, a
    ``rank0.engine`` file; the engine's bytes are not read before it runs); returns ``folder``."""
    folder.mkdir(parents=True)
    config = {"version": "0.18.0", "pretrained_config": {"architecture": "LlamaForCausalLM"}, "build_config": {}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "rank0.engine").write_bytes(b"\0" * 16)
    return folder


def localinfer_command(model: str) -> list[str]:
    """``localinfer serve MODEL``, a small CPU stand-in for ``vllm serve MODEL`` (one slot, one thread)."""
    return [sys.executable, "-m", "localinfer.app.cli", "serve", model]


LOCALINFER_ARGS = ["--ctx-size", "512", "--parallel", "1", "--threads", "1"]
LOCALINFER_KEY_ENV = "LOCALINFER_API_KEY"  # where 'localinfer serve', the stand-in engine, reads its key


def start_localinfer(gguf: Path, tmp_path: Path) -> EngineProcess:
    """A ready ``localinfer serve`` stand-in engine serving ``gguf``."""
    process = EngineProcess(
        openai_server(localinfer_command(str(gguf)), LOCALINFER_ARGS, key_env=LOCALINFER_KEY_ENV),
        log_path=tmp_path / "engine.log",
        env=standin_env(tmp_path),
    )
    process.start()
    try:
        asyncio.run(process.wait_ready(60))
    except BaseException:
        asyncio.run(process.stop(grace=2))
        raise
    return process


@pytest.fixture(scope="module")
def engine(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """A ready localinfer stand-in engine shared by a module's tests (which must not stop it)."""
    process = start_localinfer(smollm2_gguf, tmp_path_factory.mktemp("engine"))
    try:
        yield process
    finally:
        asyncio.run(process.stop(grace=5))


@contextmanager
def serving_proxy(process: EngineProcess) -> Iterator[str]:
    """A real uvicorn on 127.0.0.1, in a thread, relaying /v1/* to ``process``; yields its base URL."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.proxy = EngineProxy(process.url, process.api_key, alive=lambda: process.alive)
        yield
        await app.state.proxy.aclose()

    app = FastAPI(lifespan=lifespan, routes=[relay_route(lambda request: request.app.state.proxy)])
    with serving_app(app) as url:
        yield url


@contextmanager
def serving_app(app: ASGIApp) -> Iterator[str]:
    """A real uvicorn on 127.0.0.1, in a thread, serving ``app`` (its lifespan included); yields its base URL."""
    listening = socket.create_server(("127.0.0.1", 0))  # connections queue here until uvicorn takes them
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, name="proxy uvicorn", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        listening.close()


def group_members(pgid: int) -> list[psutil.Process]:
    """The live (not zombie) processes in process group ``pgid``."""
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p)
        except (psutil.Error, ProcessLookupError):
            pass
    return members


def gone(processes: list[psutil.Process]) -> bool:
    """Whether every one of ``processes`` has exited (a zombie counts as exited)."""
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True
