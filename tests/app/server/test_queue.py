"""More requests than slots, through a real server on SmolLM2: every request is answered or refused, none is lost."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

# A request that runs for a long time whatever the CPU: thousands of tokens, the end of text ignored.
LONG = {"max_tokens": 4000, "ignore_eos": True, "temperature": 0}


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "smollm2", "messages": [{"role": "user", "content": text}], **extra}


def chat(server: Server, text: str, max_tokens: int) -> dict[str, Any]:
    body = chat_body(text, max_tokens=max_tokens, ignore_eos=True, temperature=0)
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def stream_chat(server: Server, text: str, max_tokens: int) -> str:
    """Stream a chat; return its text once ``[DONE]`` came."""
    body = chat_body(text, max_tokens=max_tokens, ignore_eos=True, temperature=0, stream=True)
    parts: list[str] = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=300) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line == "data: [DONE]":
                return "".join(parts)
            if line.startswith("data: "):
                parts.extend(c["delta"].get("content") or "" for c in json.loads(line[6:])["choices"])
    raise AssertionError("the stream ended without [DONE]")


def health(server: Server) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{server.url}/health", timeout=30).json()
    return body


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll ``condition`` (a server's state, read over HTTP) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def four_slots(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("serve-four-slots")
    with serving(smollm2.name, test_home, log_dir, "--parallel", "4", "--ctx-size", str(4 * 2048)) as server:
        yield server


def test_a_burst_of_twice_the_slots_is_served_and_the_server_keeps_serving(four_slots: Server) -> None:
    """The wedge that was: 8 equal requests on 4 slots; the first 4 finished in the same step and the other 4
    waited forever, and so did every request after them."""
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: chat(four_slots, f"Count to {i}", 16), range(8)))
    assert [r["usage"]["completion_tokens"] for r in results] == [16] * 8
    with ThreadPoolExecutor(64) as pool:
        texts = list(pool.map(lambda i: stream_chat(four_slots, f"Tell me about the number {i}", 8), range(64)))
    assert len(texts) == 64 and all(texts)
    assert health(four_slots) == {"status": "ok", "slots_idle": 4, "slots_processing": 0, "requests_waiting": 0}


@pytest.fixture
def one_slot_one_seat(smollm2: Manifest, test_home: Path, tmp_path: Path) -> Iterator[Server]:
    args = ("--parallel", "1", "--max-queue", "1", "--ctx-size", "4096")
    with serving(smollm2.name, test_home, tmp_path, *args) as server:
        yield server


def send_raw(server: Server, body: dict[str, Any]) -> socket.socket:
    """POST a chat request on a bare socket, whose closing is a client hanging up."""
    host, port = server.url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def test_a_full_queue_says_503_queue_full_and_a_client_that_hangs_up_while_waiting_frees_its_place(
    one_slot_one_seat: Server,
) -> None:
    server = one_slot_one_seat
    running = send_raw(server, chat_body("Write a long story.", stream=True, **LONG))
    wait_until(lambda: health(server)["slots_processing"] == 1, "the first request has the slot")
    waiting = send_raw(server, chat_body("Write another story.", **LONG))
    wait_until(lambda: health(server)["requests_waiting"] == 1, "the second request waits")

    refused = httpx.post(f"{server.url}/v1/chat/completions", json=chat_body("Hi", max_tokens=4), timeout=60)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "queue_full"
    assert refused.headers["retry-after"] == "1"

    waiting.close()  # the waiting client hangs up: its place in the queue is freed while the slot stays busy
    wait_until(lambda: health(server)["requests_waiting"] == 0, "the hung-up request left the queue")
    assert health(server)["slots_processing"] == 1
    with ThreadPoolExecutor(1) as pool:
        admitted = pool.submit(chat, server, "Hi", 4)  # it waits in the freed place for the slot
        wait_until(lambda: health(server)["requests_waiting"] == 1, "the next request is admitted and waits")
        running.close()  # the running client hangs up: its slot goes to the one waiting
        assert admitted.result(timeout=300)["usage"]["completion_tokens"] == 4
    assert health(server)["slots_idle"] == 1


def test_a_request_waiting_when_every_slot_finishes_at_once_is_served(one_slot_one_seat: Server) -> None:
    """The wedge, made certain: with one slot, every running request finishes in the same step whenever the
    running one ends; the one waiting then waited forever (the loop slept because no slot was busy)."""
    server = one_slot_one_seat
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(chat, server, "Write a long story.", 200)
        wait_until(lambda: health(server)["slots_processing"] == 1, "the first request has the slot")
        second = pool.submit(chat, server, "Hi", 8)
        wait_until(lambda: health(server)["requests_waiting"] == 1, "the second request waits")
        assert first.result(timeout=600)["usage"]["completion_tokens"] == 200
        assert second.result(timeout=600)["usage"]["completion_tokens"] == 8
