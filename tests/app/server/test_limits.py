"""Bounded input, through a real server on SmolLM2: hostile bodies get a 4xx in the route's dialect, never a 500,
a stall or a crash, and /health keeps answering at once."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

MAX_BODY = 4 * 1024 * 1024
CTX = 2048


@pytest.fixture(scope="module")
def server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("serve-limits")
    with serving(smollm2.name, test_home, log_dir, "--ctx-size", str(CTX), "--max-body", str(MAX_BODY)) as server:
        yield server


def post(server: Server, path: str, content: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}{path}", content=content, headers={"Content-Type": "application/json", **headers}, timeout=120
    )


def chat(text: str = "Hi", **extra: Any) -> dict[str, Any]:
    return {"model": "smollm2", "messages": [{"role": "user", "content": text}], "max_tokens": 4, **extra}


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param
    message: str = error["message"]
    return message


def test_json_nested_ten_thousand_deep_is_a_400_in_each_dialect(server: Server) -> None:
    deep = b'{"model": "smollm2", "messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    assert "nested more than 200 levels" in assert_openai_error(post(server, "/v1/chat/completions", deep), 400)
    ollama = post(server, "/api/pull", deep)
    assert ollama.status_code == 400 and "nested more than 200 levels" in ollama.json()["error"]


def test_a_lone_surrogate_invalid_utf8_and_nan_are_400s(server: Server) -> None:
    surrogate = b'{"model": "\\ud800", "messages": [{"role": "user", "content": "Hi"}]}'
    assert "not valid JSON" in assert_openai_error(post(server, "/v1/chat/completions", surrogate), 400)
    invalid_utf8 = b'{"model": "smollm2", "prompt": "\xff\xfe"}'
    assert "not valid JSON" in assert_openai_error(post(server, "/v1/completions", invalid_utf8), 400)
    nan = json.dumps(chat(temperature=float("nan"))).encode()
    assert "not valid JSON" in assert_openai_error(post(server, "/v1/chat/completions", nan), 400)


def test_a_body_over_the_limit_is_a_413_whether_or_not_it_says_its_length(server: Server) -> None:
    big = json.dumps(chat("x" * (MAX_BODY + 10))).encode()
    message = assert_openai_error(post(server, "/v1/chat/completions", big), 413)
    assert "--max-body" in message

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server counts what it reads
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    chunked = httpx.post(
        f"{server.url}/v1/chat/completions", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert_openai_error(chunked, 413)
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_too_many_json_values_is_a_400(server: Server) -> None:
    body = json.dumps(chat(stop=[])).encode().replace(b'"stop": []', b'"stop": [' + b"1," * 200_000 + b"1]")
    assert "too many JSON values" in assert_openai_error(post(server, "/v1/chat/completions", body), 400)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repeat_last_n", 400_000_000),
        ("top_k", 10**9),
        ("max_tokens", CTX + 1),
        ("stop", [str(i) for i in range(17)]),
        ("stop", "x" * 1000),
        ("seed", 2**70),
    ],
)
def test_every_number_out_of_range_is_a_400_naming_the_field(server: Server, field: str, value: Any) -> None:
    body = json.dumps(chat(**{field: value})).encode()
    message = assert_openai_error(post(server, "/v1/chat/completions", body), 400)
    assert field in message


def test_num_predict_past_the_context_is_served_on_ollamas_route_and_ends_with_length(server: Server) -> None:
    # Ollama (and llama-server) serve any num_predict until the context is full; OpenAI's route refuses it (above)
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "word " * (CTX - 300)}],
        "options": {"num_predict": CTX * 4, "temperature": 0},
        "stream": False,
    }
    answer = httpx.post(f"{server.url}/api/chat", content=json.dumps(body).encode(), timeout=300)
    assert answer.status_code == 200, answer.text
    final = answer.json()
    assert final["done_reason"] in ("stop", "length")
    assert final["prompt_eval_count"] + final["eval_count"] <= CTX


def test_a_prompt_longer_than_any_context_is_refused_without_being_tokenized(server: Server) -> None:
    """3 MB of text cannot fit 2048 tokens whatever it says: refused from its size alone, as too long."""
    body = json.dumps({"model": "smollm2", "prompt": "word " * 600_000, "max_tokens": 4}).encode()
    response = post(server, "/v1/completions", body)
    assert "at least" in assert_openai_error(response, 400)
    assert response.json()["error"]["code"] == "context_length_exceeded"


def test_health_answers_within_100_ms_while_hostile_bodies_arrive(server: Server, tmp_path: Path) -> None:
    """The issue's bound: no input makes /health slower than 100 ms. Each hostile body is sent by curl, three times
    one after the other, so the test's own Python shares no lock with the requests it times."""
    bodies = {
        "garbage": b"\x00garbage" * (MAX_BODY // 9),
        "values": b"[" + b"1," * 99_000 + b"1]",
        "prompt": json.dumps({"model": "smollm2", "prompt": "word " * 700_000, "max_tokens": 4}).encode(),
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "over": b"x" * (MAX_BODY + 1),
    }
    worst: dict[str, float] = {}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for name, body in bodies.items():
            path = tmp_path / f"{name}.json"
            path.write_bytes(body)
            for _ in range(3):
                sender = subprocess.Popen(
                    [
                        "curl",
                        "-s",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        "-H",
                        "Content-Type: application/json",
                        "--data-binary",
                        f"@{path}",
                        f"{server.url}/v1/completions",
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                while sender.poll() is None:
                    start = time.perf_counter()
                    assert client.get("/health").status_code == 200
                    worst[name] = max(worst.get(name, 0.0), time.perf_counter() - start)
                assert sender.communicate()[0] in {"400", "413"}, name
    slow = {name: f"{seconds * 1000:.0f} ms" for name, seconds in worst.items() if seconds >= 0.100}
    assert not slow, f"/health was slower than 100 ms while these bodies arrived: {slow}"
