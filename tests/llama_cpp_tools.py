"""llama.cpp's own tools (llama-server, llama-quantize, llama-perplexity, llama-imatrix), built by
bench/build-llama-cpp from the source llama-cpp-python vendors, for the tests that compare localinfer with them.
Where they are not built yet, the first test that needs one builds them (once, cached: about 5 minutes); a build
that fails fails the test. None of these tests is skipped."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.app.server.conftest import free_port


def llama_tool(name: str) -> Path:
    """``name`` where bench/build-llama-cpp caches its builds for the llama-cpp-python version installed (or the
    path ``LOCALINFER_LLAMA_SERVER`` names, for llama-server), built first when it is not there."""
    explicit = os.environ.get("LOCALINFER_LLAMA_SERVER")
    if name == "llama-server" and explicit:
        return Path(explicit)
    found = _built(name) or (_build() and _built(name))
    assert found, f"bench/build-llama-cpp built no {name}"
    return found


def _built(name: str) -> Path | None:
    default_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "localinfer" / "build"
    cache = Path(os.environ.get("LOCALINFER_BUILD_CACHE") or default_cache)
    version = importlib.metadata.version("llama_cpp_python")
    found = sorted(p for p in cache.glob(f"llama.cpp/{version}-*/bin/{name}") if os.access(p, os.X_OK))
    return found[0] if found else None


@functools.cache
def _build() -> bool:
    """Run bench/build-llama-cpp once per session (it rebuilds nothing that is cached)."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        ["bash", str(root / "bench" / "build-llama-cpp")], capture_output=True, text=True, timeout=3000, check=False
    )
    assert proc.returncode == 0, f"bench/build-llama-cpp failed:\n{proc.stderr[-4000:]}"
    return True


@contextmanager
def llama_server(model: Path, log_dir: Path, *args: str) -> Iterator[str]:
    """A llama-server on ``model`` with ``args``, its URL while the block runs."""
    binary = llama_tool("llama-server")
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
