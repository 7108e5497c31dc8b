"""llama.cpp's own tools (llama-server, llama-quantize, llama-perplexity), built by bench/build-llama-cpp from the
source llama-cpp-python vendors, for the tests that compare localinfer with them. Where a tool is not built, those
tests skip saying so (pytest's -ra lists the reason); every other real-model test runs."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.app.server.conftest import free_port


def llama_tool(name: str) -> Path | None:
    """``name`` where bench/build-llama-cpp caches its builds for the llama-cpp-python version installed (or the
    path ``LOCALINFER_LLAMA_SERVER`` names, for llama-server); None when it is not built."""
    explicit = os.environ.get("LOCALINFER_LLAMA_SERVER")
    if name == "llama-server" and explicit:
        return Path(explicit)
    default_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "localinfer" / "build"
    cache = Path(os.environ.get("LOCALINFER_BUILD_CACHE") or default_cache)
    version = importlib.metadata.version("llama_cpp_python")
    found = sorted(p for p in cache.glob(f"llama.cpp/{version}-*/bin/{name}") if os.access(p, os.X_OK))
    return found[0] if found else None


@contextmanager
def llama_server(model: Path, log_dir: Path, *args: str) -> Iterator[str]:
    """A llama-server on ``model`` with ``args``, its URL while the block runs; skips the test when it is not
    built."""
    binary = llama_tool("llama-server")
    if binary is None:
        pytest.skip("llama-server is not built here: run bench/build-llama-cpp (about 5 minutes) to compare with it")
    port = free_port()
    log = log_dir / f"llama-server-{port}.log"
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"llama-server exited:\n{log.read_text(errors='replace')}"
            assert time.monotonic() < deadline, f"llama-server did not start:\n{log.read_text(errors='replace')}"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
