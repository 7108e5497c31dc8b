"""SIGTERM and Ctrl-C stop a real ``localinfer serve`` on SmolLM2 well: no new connections, running requests get the
grace period, what still runs then is ended properly (a stream's last events say why), and the process exits 0;
a second signal exits at once, without a traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.config import Settings
from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, start_server, stop_server
from tests.app.server.management import API_KEY, SMOL_REPO, managed_server

pytestmark = pytest.mark.model

# A stream that runs for a long time whatever the CPU: 2000 tokens (the context holds 2048), the end of text ignored.
LONG = {"max_tokens": 2000, "ignore_eos": True, "temperature": 0}
# Ending what runs after the grace period takes one step of the engine, and unloading SmolLM2 a moment: the 10 s
# the issue allows from the first signal to the exit, with the default 5 s of grace.
EXIT_WITHIN = 10.0


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "smollm2", "messages": [{"role": "user", "content": text}], **extra}


def stream_events(server: Server, body: dict[str, Any], started: threading.Event) -> list[Any]:
    """Stream a chat; set ``started`` once its first content arrived; return every event (JSON, or ``[DONE]``)."""
    events: list[Any] = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=300) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            event = data if data == "[DONE]" else json.loads(data)
            events.append(event)
            if isinstance(event, dict) and any(c["delta"].get("content") for c in event.get("choices", [])):
                started.set()
    return events


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll ``condition`` (the server's state, seen from outside) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


def refuses_connections(server: Server) -> bool:
    """Whether a connection to the server is refused now (one the kernel queued just as the listening socket
    closed is reset instead: not yet a refusal)."""
    try:
        httpx.get(f"{server.url}/health", timeout=5)
    except httpx.ConnectError:
        return True
    except httpx.TransportError:
        return False
    return False


def exit_status(server: Server, signalled: float) -> tuple[int, float]:
    """The server's exit status and the seconds from ``signalled`` to its exit (it is killed after a minute)."""
    try:
        rc = server.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        stop_server(server)
        raise AssertionError(f"the server was still running a minute after the signal:\n{server.output()}") from None
    return rc, time.monotonic() - signalled


def assert_ended_by_shutdown(events: list[Any]) -> None:
    """The stream's last events: a chunk with ``finish_reason`` ``abort``, the error, ``[DONE]``; none before."""
    assert len(events) >= 4, events
    *streamed, finish, error, done = events
    assert done == "[DONE]"
    assert error["error"]["code"] == "server_shutting_down"
    assert error["error"]["type"] == "server_error"
    assert error["error"]["message"]
    assert [c["finish_reason"] for c in finish["choices"]] == ["abort"]
    assert finish["object"] == "chat.completion.chunk"
    assert all(c["finish_reason"] is None for e in streamed for c in e["choices"])
    assert any(c["delta"].get("content") for e in streamed for c in e["choices"])


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path


def test_sigterm_ends_eight_live_streams_properly_and_exits_0_within_10_s(
    smollm2: Manifest, test_home: Path, log_dir: Path
) -> None:
    server = start_server(smollm2.name, test_home, log_dir, "--parallel", "8", "--ctx-size", str(8 * 2048))
    try:
        started = [threading.Event() for _ in range(8)]
        with ThreadPoolExecutor(8) as pool:
            streams = [
                pool.submit(stream_events, server, chat_body(f"Tell me a story about {i}", stream=True, **LONG), s)
                for i, s in enumerate(started)
            ]
            for event, stream in zip(started, streams, strict=True):
                while not event.wait(0.1):
                    assert not stream.done(), stream.result()  # a stream that failed to start says why
            server.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            results = [s.result(timeout=60) for s in streams]
        rc, took = exit_status(server, signalled)
    finally:
        stop_server(server)
    for events in results:
        assert_ended_by_shutdown(events)
    assert rc == 0, server.output()
    assert took < EXIT_WITHIN, took
    assert "Traceback" not in server.output()


def test_requests_that_finish_within_the_grace_period_get_their_whole_answer_and_then_it_exits_0(
    smollm2: Manifest, test_home: Path, log_dir: Path
) -> None:
    """A stream and a plain request, both being generated when SIGTERM comes, get every token they asked for; the
    server exits once they are done, not at the end of the grace period."""
    server = start_server(
        smollm2.name, test_home, log_dir, "--parallel", "2", "--ctx-size", str(2 * 2048), "--shutdown-timeout", "120"
    )
    short = {"max_tokens": 200, "ignore_eos": True, "temperature": 0}
    try:
        started = threading.Event()
        with ThreadPoolExecutor(2) as pool:
            stream = pool.submit(stream_events, server, chat_body("Tell me a story", stream=True, **short), started)
            assert started.wait(120), stream.result()
            plain = pool.submit(
                httpx.post, f"{server.url}/v1/chat/completions", json=chat_body("Count", **short), timeout=300
            )
            wait_until(
                lambda: httpx.get(f"{server.url}/health", timeout=5).json()["slots_processing"] == 2 or plain.done(),
                "the plain request is being generated",
            )
            assert not plain.done() and not stream.done()  # both were running when the signal came
            server.process.send_signal(signal.SIGTERM)
            answer = plain.result(timeout=120)
            events = stream.result(timeout=120)
        rc = server.process.wait(timeout=120)
    finally:
        stop_server(server)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["finish_reason"] == "length"
    assert answer.json()["usage"]["completion_tokens"] == 200
    assert events[-1] == "[DONE]"
    assert [c["finish_reason"] for c in events[-2]["choices"]] == ["length"]
    assert not any("error" in e for e in events if isinstance(e, dict))
    assert rc == 0, server.output()
    assert "ending the requests still running" not in server.output()  # it did not wait for the grace period


def test_after_sigterm_new_connections_are_refused_while_running_requests_go_on(
    smollm2: Manifest, test_home: Path, log_dir: Path
) -> None:
    server = start_server(smollm2.name, test_home, log_dir, "--ctx-size", "2048", "--shutdown-timeout", "10")
    try:
        started = threading.Event()
        with ThreadPoolExecutor(1) as pool:
            long = pool.submit(stream_events, server, chat_body("Tell me a story", stream=True, **LONG), started)
            assert started.wait(120), long.result()
            server.process.send_signal(signal.SIGTERM)
            wait_until(lambda: refuses_connections(server), "new connections are refused", timeout=10)
            assert not long.done()  # the stream goes on in its grace period
            events = long.result(timeout=60)
        rc = server.process.wait(timeout=60)
    finally:
        stop_server(server)
    assert_ended_by_shutdown(events)
    assert rc == 0, server.output()


def test_requests_not_streamed_or_still_waiting_for_a_slot_get_a_503_in_the_openai_shape(
    smollm2: Manifest, test_home: Path, log_dir: Path
) -> None:
    server = start_server(
        smollm2.name, test_home, log_dir, "--parallel", "1", "--ctx-size", "2048", "--shutdown-timeout", "1"
    )
    url = f"{server.url}/v1/chat/completions"
    try:
        started = threading.Event()
        with ThreadPoolExecutor(3) as pool:
            running = pool.submit(stream_events, server, chat_body("Tell me a story", stream=True, **LONG), started)
            assert started.wait(120), running.result()
            plain = pool.submit(httpx.post, url, json=chat_body("Count", **LONG), timeout=120)
            queued_stream = pool.submit(httpx.post, url, json=chat_body("Hi", stream=True, **LONG), timeout=120)
            wait_until(
                lambda: httpx.get(f"{server.url}/health", timeout=5).json()["requests_waiting"] == 2,
                "both wait for the one slot",
            )
            server.process.send_signal(signal.SIGTERM)
            answers = [plain.result(timeout=60), queued_stream.result(timeout=60)]
            events = running.result(timeout=60)
        rc = server.process.wait(timeout=60)
    finally:
        stop_server(server)
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json() == {
            "error": {
                "message": "the server is shutting down; retry when the server is back",
                "type": "server_error",
                "param": None,
                "code": "server_shutting_down",
            }
        }
    assert_ended_by_shutdown(events)
    assert rc == 0, server.output()


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_second_signal_in_the_grace_period_exits_at_once_without_a_traceback(
    smollm2: Manifest, test_home: Path, log_dir: Path, second: signal.Signals
) -> None:
    server = start_server(smollm2.name, test_home, log_dir, "--ctx-size", "2048", "--shutdown-timeout", "60")
    try:
        started = threading.Event()
        with ThreadPoolExecutor(1) as pool:
            long: Future[list[Any]] = pool.submit(
                stream_events, server, chat_body("Tell me a story", stream=True, **LONG), started
            )
            assert started.wait(120), long.result()
            server.process.send_signal(signal.SIGINT)
            signalled = time.monotonic()
            wait_until(lambda: "stopping:" in server.output(), "the server began its graceful stop", timeout=10)
            server.process.send_signal(second)
            rc, took = exit_status(server, signalled)
            with pytest.raises(httpx.HTTPError):
                long.result(timeout=60)
    finally:
        stop_server(server)
    assert rc == 128 + second
    assert took < 60.0  # the grace period was not waited for
    assert "stopped at once" in server.output()
    assert "Traceback" not in server.output()


def test_the_shutdown_timeout_is_5_s_and_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALINFER_CONFIG", str(tmp_path / "none.toml"))
    assert Settings().shutdown_timeout == 5.0
    monkeypatch.setenv("LOCALINFER_SHUTDOWN_TIMEOUT", "2.5")
    assert Settings().shutdown_timeout == 2.5
    monkeypatch.delenv("LOCALINFER_SHUTDOWN_TIMEOUT")
    (tmp_path / "config.toml").write_text("shutdown_timeout = 12\n")
    monkeypatch.setenv("LOCALINFER_CONFIG", str(tmp_path / "config.toml"))
    assert Settings().shutdown_timeout == 12.0


def test_sigterm_ends_a_pull_in_flight_with_an_error_line_and_keeps_its_partial_download(
    smollm2: Manifest, tmp_path: Path
) -> None:
    """No Ollama generation route streams NDJSON yet: the pull's NDJSON stream is the one there is. Its last line
    is the error; the download stops, keeps what it has for a resume, and registers nothing."""
    auth = {"Authorization": f"Bearer {API_KEY}"}
    lines: list[dict[str, Any]] = []
    signalled = False
    with managed_server(smollm2, tmp_path, "--shutdown-timeout", "1") as managed:
        managed.hub.rate_limit = 1_000_000  # a pull of minutes
        with httpx.stream(
            "POST", f"{managed.url}/api/pull", json={"model": SMOL_REPO}, headers=auth, timeout=60
        ) as response:
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                if line:
                    lines.append(json.loads(line))
                    if lines[-1].get("completed") and not signalled:
                        managed.server.process.send_signal(signal.SIGTERM)  # once bytes have come
                        signalled = True
        rc = managed.server.process.wait(timeout=60)
        output = managed.server.output()
        pulled = managed.store.get(SMOL_REPO)
        partials = [p for p in managed.hf_home.rglob("*.incomplete") if p.stat().st_size > 0]
    assert lines[-1] == {"error": "the server is shutting down; retry when the server is back"}
    assert all("error" not in line for line in lines[:-1])
    assert rc == 0, output
    assert pulled is None  # no manifest: nothing half-registered
    assert partials, "the partial download is kept for a resume"
    assert "Traceback" not in output
