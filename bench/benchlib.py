"""Helpers shared by the benchmark scripts: the llama.cpp build, server processes and streamed requests.

Only the standard library, httpx and psutil (a localinfer dependency), so the scripts run with the project's dev
virtualenv and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
HOST = "127.0.0.1"


class BenchError(RuntimeError):
    """A benchmark step failed; the message says which and why."""


def llama_cpp_bin(explicit: Path | None, tools: Sequence[str] = ("llama-server", "llama-bench")) -> Path:
    """The folder with llama.cpp's ``tools``: the one given, else bench/build-llama-cpp's output."""
    if explicit is not None:
        folder = explicit
    else:
        proc = subprocess.run(
            ["bash", str(BENCH_DIR / "build-llama-cpp")], stdout=subprocess.PIPE, text=True, check=False
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise BenchError(f"bench/build-llama-cpp failed (exit {proc.returncode})")
        folder = Path(lines[-1])
    for tool in tools:
        if not os.access(folder / tool, os.X_OK):
            raise BenchError(f"{folder / tool} is missing or not executable")
    return folder


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def tail(path: Path, limit: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


class ManagedServer:
    """A server child process in its own process group, bound to 127.0.0.1, always stopped on exit.

    `cmd` must make the server listen on `port`; the server is ready when `GET <health_path>` answers 200
    (`/health` for llama-server and localinfer; llama-cpp-python's server has none, use `/v1/models`). `env`: variables
    the child gets over this process's environment.
    """

    def __init__(
        self,
        name: str,
        cmd: Sequence[str],
        port: int,
        log_path: Path,
        startup_timeout: float = 180.0,
        health_path: str = "/health",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.env = dict(env) if env is not None else None  # the child's variables over this process's
        self.cmd = list(cmd)
        self.port = port
        self.base_url = f"http://{HOST}:{port}"
        self.startup_timeout = startup_timeout
        self.health_path = health_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_path = log_path

    @property
    def pid(self) -> int:
        """The server's process id (the leader of its process group)."""
        if self._proc is None:
            raise BenchError(f"{self.name} is not running")
        return self._proc.pid

    def __enter__(self) -> ManagedServer:
        try:
            self.start()
        except BaseException:
            self.stop()  # __exit__ does not run when __enter__ raises
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so stop() reaches its children too
                env={**os.environ, **self.env} if self.env is not None else None,
            )
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise BenchError(
                        f"{self.name} exited with {code} before it was ready; log tail:\n{tail(self.log_path)}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{self.base_url}{self.health_path}").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"{self.name} not ready after {self.startup_timeout:.0f} s; log tail:\n{tail(self.log_path)}"
                    )
                time.sleep(0.2)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace` seconds; waits for the child either way."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            # The leader is gone; make sure nothing else it started in the group lives on.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            return
        print(f"warning: {self.name} (pid {proc.pid}) did not exit after SIGKILL", file=sys.stderr)

    def model_id(self, fallback: str) -> str:
        """The first id from GET /v1/models, else `fallback`."""
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            resp = httpx.get(f"{self.base_url}/v1/models", timeout=10.0)
            if resp.status_code == 200:
                return str(resp.json()["data"][0]["id"])
        return fallback


@dataclass
class StreamStats:
    """One streamed completion, timed on the client side."""

    ttft_s: float  # request sent -> first chunk carrying text
    decode_s: float  # first -> last chunk carrying text
    text_chunks: int
    usage_tokens: int | None  # usage.completion_tokens when the server sent it
    finish_reason: str | None
    server_timings: dict[str, Any] | None = None  # llama-server's own `timings`, when present
    text: str = field(default="", repr=False)
    total_s: float = 0.0  # request sent -> end of the stream
    prompt_tokens: int | None = None  # usage.prompt_tokens when the server sent it
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens when the server sent it

    @property
    def tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.text_chunks

    @property
    def decode_tps(self) -> float:
        """Tokens after the first divided by the time from the first to the last streamed token."""
        if self.tokens < 2 or self.decode_s <= 0:
            return 0.0
        return (self.tokens - 1) / self.decode_s


def _sse_events(lines: Iterator[str]) -> Iterator[tuple[float, str]]:
    for line in lines:
        now = time.perf_counter()
        if line.startswith("data:"):
            yield now, line[5:].strip()


def _chunk_text(choice: dict[str, Any]) -> str:
    """The text of one streamed choice: `text` for completions, `delta.content` for chat completions."""
    if choice.get("text"):
        return str(choice["text"])
    delta = choice.get("delta")
    if isinstance(delta, dict) and delta.get("content"):
        return str(delta["content"])
    return ""


def stream_openai(
    client: httpx.Client, base_url: str, path: str, body: dict[str, Any], timeout: float = 600.0
) -> StreamStats:
    """POST a streaming OpenAI request (`/v1/completions` or `/v1/chat/completions`), timing the chunks."""
    body = {**body, "stream": True}
    times: list[float] = []
    parts: list[str] = []
    usage_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    timings: dict[str, Any] | None = None
    sent = time.perf_counter()
    with client.stream("POST", f"{base_url}{path}", json=body, timeout=timeout) as resp:
        if resp.status_code != 200:
            resp.read()
            raise BenchError(f"POST {path} -> {resp.status_code}: {resp.text[:500]}")
        for now, data in _sse_events(resp.iter_lines()):
            if data == "[DONE]":
                break
            event = json.loads(data)
            if "error" in event:
                raise BenchError(f"error event in stream: {event['error']}")
            usage = event.get("usage")
            if isinstance(usage, dict):
                if usage.get("completion_tokens") is not None:
                    usage_tokens = int(usage["completion_tokens"])
                if usage.get("prompt_tokens") is not None:
                    prompt_tokens = int(usage["prompt_tokens"])
                details = usage.get("prompt_tokens_details")
                if isinstance(details, dict) and details.get("cached_tokens") is not None:
                    cached_tokens = int(details["cached_tokens"])
            if isinstance(event.get("timings"), dict):
                timings = event["timings"]
            for choice in event.get("choices") or []:
                text = _chunk_text(choice)
                if text:
                    times.append(now)
                    parts.append(text)
                if choice.get("finish_reason"):
                    finish_reason = str(choice["finish_reason"])
    ended = time.perf_counter()
    if not times:
        raise BenchError("the stream carried no text")
    return StreamStats(
        ttft_s=times[0] - sent,
        decode_s=times[-1] - times[0],
        text_chunks=len(times),
        usage_tokens=usage_tokens,
        finish_reason=finish_reason,
        server_timings=timings,
        text="".join(parts),
        total_s=ended - sent,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
    )


def stream_completion(client: httpx.Client, base_url: str, body: dict[str, Any], timeout: float = 600.0) -> StreamStats:
    """POST a streaming /v1/completions request and time the chunks as they arrive."""
    return stream_openai(client, base_url, "/v1/completions", body, timeout)


def stream_chat_completion(
    client: httpx.Client, base_url: str, body: dict[str, Any], timeout: float = 600.0
) -> StreamStats:
    """POST a streaming /v1/chat/completions request and time the chunks as they arrive."""
    return stream_openai(client, base_url, "/v1/chat/completions", body, timeout)


def stream_concurrently(
    base_url: str, bodies: Sequence[dict[str, Any]], timeout: float = 600.0
) -> tuple[float, list[StreamStats]]:
    """Stream all `bodies` to /v1/completions at the same moment, one client thread (and connection) each.

    Returns the wall time from the common start to the end of the last stream, and each body's stats. Raises
    BenchError when a request fails or a client is still running `timeout` + 30 s after the start.
    """
    n = len(bodies)
    barrier = threading.Barrier(n + 1)
    results: list[StreamStats | BaseException | None] = [None] * n
    ends = [0.0] * n

    def worker(i: int) -> None:
        try:
            with httpx.Client() as client:
                barrier.wait(timeout=60)  # all threads ready: start together
                results[i] = stream_completion(client, base_url, bodies[i], timeout)
        except BaseException as exc:  # reported below; a thread must not die silently
            results[i] = exc
        ends[i] = time.perf_counter()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        barrier.wait(timeout=60)
    except threading.BrokenBarrierError as exc:
        raise BenchError("the client threads did not start within 60 s") from exc
    start = time.perf_counter()
    deadline = start + timeout + 30
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.perf_counter()))
        if t.is_alive():
            raise BenchError(f"a client did not finish within {timeout + 30:.0f} s")
    stats: list[StreamStats] = []
    for res in results:
        if isinstance(res, BaseException):
            raise BenchError(f"a client failed: {type(res).__name__}: {res}") from res
        assert res is not None
        stats.append(res)
    return max(ends) - start, stats


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between the closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class RssSampler:
    """Samples the resident memory of a process and all its descendants on a background thread.

    `with RssSampler(pid) as rss: ...` then `rss.peak_bytes`; `mark()` starts a new window whose peak is
    `window_peak_bytes`, so one sampler can cover a server's whole life and each phase separately.
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_bytes = 0
        self.window_peak_bytes = 0
        self.last_bytes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def mark(self) -> None:
        """Start a new window: `window_peak_bytes` from now on only covers samples taken after this call."""
        with self._lock:
            self.window_peak_bytes = 0
        self.sample()

    def sample(self) -> int:
        """Take one sample now; returns the tree's RSS in bytes (0 when the process is gone)."""
        total = 0
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
        with self._lock:
            self.samples += 1
            self.last_bytes = total
            self.peak_bytes = max(self.peak_bytes, total)
            self.window_peak_bytes = max(self.window_peak_bytes, total)
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


def install_sigterm_handler() -> None:
    """Turn SIGTERM into SystemExit so `finally` blocks and context managers stop the servers."""

    def _raise(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)


def greedy_body(model_id: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    """A request every engine answers the same way: greedy, exactly ``max_tokens`` tokens, usage streamed."""
    return {
        "model": model_id,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)
