"""``localinfer serve`` of the converted ONNX model, driven by the official openai client: the same API as a GGUF
model on llama.cpp, from the same server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.capital_answer import CAPITAL_FORMAT, capital_in

pytestmark = pytest.mark.model

CAPITAL: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital city of France? Answer in one word."}
]
COUNT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
# A model's free greedy text differs between CPUs: the capital is one of a few, as JSON (tests/capital_answer.py),
# and the counting is written out by the schema, so the stop strings are where the tests look for them.
COUNTING: ResponseFormatJSONSchema = {
    "type": "json_schema",
    "json_schema": {"name": "counting", "schema": {"const": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"}},
}


@pytest.fixture(scope="module")
def onnx_server(smollm2_onnx: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_onnx.name, test_home, tmp_path_factory.mktemp("serve-onnx"), "--ctx-size", "2048") as server:
        yield server


@pytest.fixture(scope="module")
def client(onnx_server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{onnx_server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_a_greedy_chat_answers_with_usage(client: openai.OpenAI, smollm2_onnx: Manifest) -> None:
    reply = client.chat.completions.create(
        model=smollm2_onnx.name, messages=CAPITAL, temperature=0, response_format=CAPITAL_FORMAT
    )
    choice = reply.choices[0]
    assert capital_in(choice.message.content) == "Paris"
    assert choice.finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens > 20 and reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_a_streamed_chat_sends_deltas_then_the_finish_and_usage(client: openai.OpenAI, smollm2_onnx: Manifest) -> None:
    stream = client.chat.completions.create(
        model=smollm2_onnx.name,
        messages=CAPITAL,
        temperature=0,
        response_format=CAPITAL_FORMAT,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert capital_in(text) == "Paris"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3  # token by token
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens > 0 and not chunks[-1].choices


def test_stop_strings_are_honoured_streamed_and_not(client: openai.OpenAI, smollm2_onnx: Manifest) -> None:
    reply = client.chat.completions.create(
        model=smollm2_onnx.name, messages=COUNT, temperature=0, stop=["5"], response_format=COUNTING
    )
    assert (reply.choices[0].message.content or "").replace(" ", "") == '"1,2,3,4,'
    assert reply.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model=smollm2_onnx.name, messages=COUNT, temperature=0, stop=[", 4"], response_format=COUNTING, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.replace(" ", "") == '"1,2,3'


def test_max_tokens_is_honoured(client: openai.OpenAI, smollm2_onnx: Manifest) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write a long story about a dragon."}]
    reply = client.chat.completions.create(
        model=smollm2_onnx.name, messages=messages, max_tokens=6, extra_body={"ignore_eos": True}
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 6


def test_a_client_that_goes_away_mid_stream_stops_the_generation(onnx_server: Server, smollm2_onnx: Manifest) -> None:
    body = {
        "model": smollm2_onnx.name,
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 4000,
        "ignore_eos": True,  # llama-server's extension: 4000 tokens would take over a minute here
        "stream": True,
    }
    with httpx.stream("POST", f"{onnx_server.url}/v1/chat/completions", json=body, timeout=60) as response:
        events = (line for line in response.iter_lines() if line.startswith("data: "))
        for _ in range(5):
            next(events)  # then the connection closes
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        health = httpx.get(f"{onnx_server.url}/health", timeout=10).json()
        if health["slots_processing"] == 0:
            break
        time.sleep(0.05)
    assert health["slots_processing"] == 0


def test_one_server_serves_gguf_on_llamacpp_and_onnx_on_onnx_runtime(
    client: openai.OpenAI, onnx_server: Server, smollm2: Manifest, smollm2_onnx: Manifest
) -> None:
    for model in (smollm2.name, smollm2_onnx.name):
        reply = client.chat.completions.create(
            model=model, messages=CAPITAL, temperature=0, max_tokens=12, response_format=CAPITAL_FORMAT
        )
        assert capital_in(reply.choices[0].message.content) == "Paris"
    status = httpx.get(f"{onnx_server.url}/api/localinfer/status", timeout=30).json()
    backends = {m["name"]: m["backend"] for m in status["loaded"]}
    assert backends == {smollm2.name: "llamacpp", smollm2_onnx.name: "onnx"}
    models = {m.id for m in client.models.list()}
    assert {smollm2.name, smollm2_onnx.name} <= models
