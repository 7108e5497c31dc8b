"""llama.cpp's own tools (llama-server, llama-quantize, llama-perplexity, llama-imatrix), built by
bench/build-llama-cpp from the source llama-cpp-python vendors, for the tests that compare localinfer with them.
Where they are not built yet, the first test that needs one builds them (once, cached: several minutes); a build
that fails fails the test. None of these tests is skipped."""

from __future__ import annotations

import functools
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.app.server.conftest import free_port


def llama_tool(name: str) -> Path:
    """``name`` in the folder where bench/build-llama-cpp keeps its build for this checkout's flags (or the path
    ``LOCALINFER_LLAMA_SERVER`` names, for llama-server), built first when it is not there."""
    explicit = os.environ.get("LOCALINFER_LLAMA_SERVER")
    if name == "llama-server" and explicit:
        return Path(explicit)
    found = _bin_dir() / name
    assert os.access(found, os.X_OK), f"bench/build-llama-cpp built no {name}"
    return found


@functools.cache
def _bin_dir() -> Path:
    """Run bench/build-llama-cpp once per session: it prints the bin folder of the build for the current flags, and
    rebuilds nothing that is cached. Asking it, rather than looking through the cache, keeps a build made with other
    flags (an older version of the script) from being used."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        ["bash", str(root / "bench" / "build-llama-cpp")], capture_output=True, text=True, timeout=3000, check=False
    )
    assert proc.returncode == 0, f"bench/build-llama-cpp failed:\n{proc.stderr[-4000:]}"
    return Path(proc.stdout.strip().splitlines()[-1])


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
