"""``__verbose`` as llama-server's users see it: with ``--verbose`` (or a request's ``verbose``), the OpenAI routes'
answers carry the native answer (the prompt as the model got it, the text, the counts, the settings, the timings):
chat's answer and the closing chunk of its stream, text completions' answer and every streamed piece; without
either, none. Each checked against the real llama-server on the same GGUF and the same requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

SETTINGS = ("-c", "2048", "-np", "1")
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0}
TEXT = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}

# Each request both servers answer, by name: (path, body).
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", CHAT),
    "chat-stream": ("/v1/chat/completions", {**CHAT, "stream": True}),
    "text": ("/v1/completions", TEXT),
    "text-stream": ("/v1/completions", {**TEXT, "stream": True}),
}
ASKED = {"chat-asked": ("/v1/chat/completions", {**CHAT, "verbose": True})}


def ask(url: str, path: str, body: dict[str, Any]) -> Any:
    """The answer: the body, or a stream's events (``[DONE]`` left out)."""
    reply = httpx.post(f"{url}{path}", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    if not body.get("stream"):
        return reply.json()
    blocks = [b.strip() for b in reply.text.split("\n\n") if b.strip() and b.strip() != "data: [DONE]"]
    return [json.loads(b.removeprefix("data: ")) for b in blocks]


def answers(url: str, requests: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {name: ask(url, path, body) for name, (path, body) in requests.items()}


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """llama-server's answers, started without ``--verbose`` (``plain``) and with it (``verbose``)."""
    logs = tmp_path_factory.mktemp("llama-server")
    with llama_server(smollm2.path, logs, *SETTINGS) as url:
        plain = answers(url, {**REQUESTS, **ASKED})
    with llama_server(smollm2.path, logs, *SETTINGS, "--verbose") as url:
        verbose = answers(url, REQUESTS)
    return {"plain": plain, "verbose": verbose}


@pytest.fixture(scope="module")
def ours(
    theirs: dict[str, Any],
    smollm2: Manifest,
    smollm2_server: Server,
    test_home: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, dict[str, Any]]]:
    """localinfer's answers to the same requests, without ``--verbose`` and with it."""
    plain = answers(smollm2_server.url, {**REQUESTS, **ASKED})
    logs = tmp_path_factory.mktemp("serve-verbose")
    with serving(smollm2.name, test_home, logs, "--ctx-size", "2048", "--parallel", "1", "--verbose") as server:
        yield {"plain": plain, "verbose": answers(server.url, REQUESTS)}


@pytest.fixture(params=["ours", "theirs"])
def served(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """Each server's answers: every assertion below holds for llama-server and for localinfer alike."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_without_verbose_no_answer_carries_it(served: dict[str, dict[str, Any]]) -> None:
    plain = served["plain"]
    assert "__verbose" not in plain["chat"] and "__verbose" not in plain["text"]
    assert not any("__verbose" in event for name in ("chat-stream", "text-stream") for event in plain[name])


def test_a_request_asking_for_it_gets_it(served: dict[str, dict[str, Any]]) -> None:
    answer = served["plain"]["chat-asked"]
    assert answer["__verbose"]["content"] == answer["choices"][0]["message"]["content"]


def test_chat_answer_carries_the_native_answer(served: dict[str, dict[str, Any]]) -> None:
    answer = served["verbose"]["chat"]
    native = answer["__verbose"]
    assert native["content"] == answer["choices"][0]["message"]["content"]
    assert native["stop"] is True
    assert native["tokens_predicted"] == answer["usage"]["completion_tokens"]
    assert native["tokens_evaluated"] == answer["usage"]["prompt_tokens"]
    assert native["timings"]["predicted_n"] == answer["timings"]["predicted_n"]
    assert native["generation_settings"]["stream"] is False


def test_chat_native_answer_has_llama_servers_fields_and_prompt(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    mine, native = ours["verbose"]["chat"]["__verbose"], theirs["verbose"]["chat"]["__verbose"]
    assert set(mine) == set(native)
    assert mine["prompt"] == native["prompt"]  # the template rendered as llama.cpp renders it
    assert [mine[k] for k in ("tokens_evaluated", "tokens", "index", "truncated")] == [
        native[k] for k in ("tokens_evaluated", "tokens", "index", "truncated")
    ]
    shared = ("n_predict", "temperature", "top_k", "top_p", "min_p", "stream")  # llama-server's are float32
    mine_settings = [mine["generation_settings"][k] for k in shared]
    assert mine_settings == pytest.approx([native["generation_settings"][k] for k in shared])
    assert set(mine["timings"]) == set(native["timings"])


def test_a_chat_stream_carries_it_once_on_the_closing_chunk(served: dict[str, dict[str, Any]]) -> None:
    events = served["verbose"]["chat-stream"]
    carrying = [event for event in events if "__verbose" in event]
    assert len(carrying) == 1
    assert carrying[0]["choices"][0]["finish_reason"] is not None
    native = carrying[0]["__verbose"]
    assert native["content"] == "" and native["stop"] is True  # the text went out in the pieces
    assert native["generation_settings"]["stream"] is True


def test_text_completion_answer_and_every_piece_carry_it(served: dict[str, dict[str, Any]]) -> None:
    answer = served["verbose"]["text"]
    assert answer["__verbose"]["content"] == answer["choices"][0]["text"]
    assert answer["__verbose"]["prompt"] == TEXT["prompt"]
    pieces = [event for event in served["verbose"]["text-stream"] if event["choices"][0]["text"]]
    assert pieces
    for piece in pieces:
        assert piece["__verbose"]["content"] == piece["choices"][0]["text"]
        assert piece["__verbose"]["stop"] is False
    closing = served["verbose"]["text-stream"][-1]
    assert closing["choices"][0]["finish_reason"] is not None and closing["__verbose"]["stop"] is True
