"""Several clients at once: slots, batching, prefix reuse, cancellation and isolation, through a real server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving, tokens_predicted

pytestmark = pytest.mark.model

PROMPTS = [
    "The first rule of the garden is",
    "In 1969, the astronauts",
    "My favourite recipe for bread",
    "The train left the station and",
    "Dear diary, today I learned",
    "The old lighthouse keeper said",
    "To build a fast computer you need",
    "The river flows past the city of",
]


def complete(server: Server, prompt: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    body = {"model": "smollm2", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    response = httpx.post(f"{server.url}/v1/completions", json={**body, **extra}, timeout=120)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def stream_text(
    server: Server, prompt: str, max_tokens: int, started: threading.Event | None = None
) -> tuple[str, int]:
    """Stream a completion; return its text and the completion tokens its usage chunk reports. ``started`` is set
    once its first token has arrived."""
    body = {
        "model": "smollm2",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    parts: list[str] = []
    tokens = -1
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if chunk["choices"]:
                parts.append(chunk["choices"][0]["text"])
                if started is not None:
                    started.set()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return "".join(parts), tokens


@pytest.fixture(scope="module")
def batch_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(
        smollm2.name, test_home, tmp_path_factory.mktemp("batch"), "--parallel", "4", "--ctx-size", str(4 * 4096)
    ) as server:
        yield server


def test_greedy_text_alone_equals_text_inside_a_batch_of_four(batch_server: Server) -> None:
    alone = [complete(batch_server, p, 24)["choices"][0]["text"] for p in PROMPTS[:4]]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: complete(batch_server, p, 24)["choices"][0]["text"], PROMPTS[:4]))
    assert together == alone


def test_eight_concurrent_streams_complete_with_their_own_text_and_token_count(batch_server: Server) -> None:
    lengths = [20 + 5 * i for i in range(8)]
    expected = [complete(batch_server, p, n)["choices"][0]["text"] for p, n in zip(PROMPTS, lengths, strict=True)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda pn: stream_text(batch_server, *pn), zip(PROMPTS, lengths, strict=True)))
    assert [tokens for _, tokens in results] == lengths
    assert [text for text, _ in results] == expected  # each stream got its own tokens, none of another's


def test_a_shared_long_prefix_is_computed_once_and_gives_the_same_reply(batch_server: Server) -> None:
    document = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(60))
    first = complete(batch_server, document + "\nQuestion one: what jumps?", 4)
    second = complete(batch_server, document + "\nQuestion two: who is lazy?", 4)
    afresh = complete(batch_server, document + "\nQuestion two: who is lazy?", 4, cache_prompt=False)
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < 10
    assert cached > 0.9 * first["usage"]["prompt_tokens"]
    assert second["timings"]["prompt_n"] == second["usage"]["prompt_tokens"] - cached
    assert afresh["timings"]["prompt_n"] == afresh["usage"]["prompt_tokens"]
    assert second["choices"][0]["text"] == afresh["choices"][0]["text"]


@pytest.fixture(scope="module")
def one_slot_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(
        smollm2.name, test_home, tmp_path_factory.mktemp("one-slot"), "--parallel", "1", "--max-queue", "1"
    ) as server:
        yield server


def wait_for(server: Server, key: str, value: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{server.url}/health").json()[key] != value:
        assert time.monotonic() < deadline, f"{key} never became {value}: {httpx.get(f'{server.url}/health').json()}"
        time.sleep(0.02)


def test_a_disconnected_stream_lets_the_queued_request_start_at_once(one_slot_server: Server) -> None:
    body = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True, "stream": True}
    answered: list[dict[str, Any]] = []
    before = tokens_predicted(one_slot_server.url)
    with httpx.stream("POST", f"{one_slot_server.url}/v1/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        next(lines)
        waiter = threading.Thread(
            target=lambda: answered.append(complete(one_slot_server, "The capital of France is", 2))
        )
        waiter.start()
        wait_for(one_slot_server, "requests_waiting", 1)
    waiter.join()
    assert answered and answered[0]["usage"]["completion_tokens"] == 2
    # the queued request was served after the long stream had generated far less than its 4000 tokens: it started
    # when the client left, not when the stream would have ended
    assert tokens_predicted(one_slot_server.url) - before < 2000


def test_a_full_queue_answers_503_in_openai_shape(one_slot_server: Server) -> None:
    body = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{one_slot_server.url}/v1/completions", json=body, timeout=60) as running:
        assert running.status_code == 200, running.read()
        lines = running.iter_lines()  # kept: a dropped iterator closes the stream, and the server stops
        next(lines)
        waiter = threading.Thread(target=complete, args=(one_slot_server, "Hello", 2))
        waiter.start()
        wait_for(one_slot_server, "requests_waiting", 1)
        client = openai.OpenAI(base_url=f"{one_slot_server.url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            client.completions.create(model="smollm2", prompt="One more", max_tokens=2)
    waiter.join(timeout=60)
    assert caught.value.status_code == 503
    assert caught.value.code == "queue_full"
    assert "busy" in str(caught.value.body)


def test_a_failing_request_does_not_disturb_the_others(batch_server: Server) -> None:
    expected = [complete(batch_server, p, 40)["choices"][0]["text"] for p in PROMPTS[:2]]
    bad_schema = {"type": "object", "properties": {"x": {"$ref": "#/definitions/missing"}}}
    with ThreadPoolExecutor(3) as pool:
        started = [threading.Event() for _ in PROMPTS[:2]]
        streams = [pool.submit(stream_text, batch_server, p, 40, s) for p, s in zip(PROMPTS[:2], started, strict=True)]
        for event in started:  # both generating when the bad request comes
            assert event.wait(timeout=120)
        bad = httpx.post(
            f"{batch_server.url}/v1/chat/completions",
            json={
                "model": "smollm2",
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": bad_schema}},
            },
            timeout=60,
        )
        texts = [s.result()[0] for s in streams]
    assert bad.status_code == 400
    assert texts == expected
    assert httpx.get(f"{batch_server.url}/health").json()["status"] == "ok"
