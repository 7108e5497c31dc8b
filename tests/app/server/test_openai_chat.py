"""Chat completions through a real server with the real SmolLM2 model, driven by the official openai client."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.app.server.conftest import Server

pytestmark = pytest.mark.model

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello in one short sentence."}]


def test_chat_non_streamed_returns_assistant_text_and_usage(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(model=model_name, messages=HELLO, max_tokens=32, temperature=0)
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content and reply.choices[0].message.content.strip()
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None
    assert reply.usage.prompt_tokens > 10  # the template adds the system prompt and turn markers
    assert 0 < reply.usage.completion_tokens <= 32
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_chat_streamed_chunks_share_id_and_end_with_finish_reason(client: openai.OpenAI, model_name: str) -> None:
    chunks = list(
        client.chat.completions.create(model=model_name, messages=HELLO, max_tokens=24, temperature=0, stream=True)
    )
    assert len({c.id for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].choices[0].delta.content is None
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.strip()


def test_streamed_text_equals_non_streamed_text(client: openai.OpenAI, model_name: str) -> None:
    whole = client.chat.completions.create(model=model_name, messages=HELLO, max_tokens=24, temperature=0)
    streamed = client.chat.completions.create(
        model=model_name, messages=HELLO, max_tokens=24, temperature=0, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == whole.choices[0].message.content


def test_stream_include_usage_sends_a_usage_chunk_before_done(smollm2_server: Server, model_name: str) -> None:
    body = {
        "model": model_name,
        "messages": HELLO,
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{smollm2_server.url}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 8
    assert all(c["usage"] is None for c in chunks[:-1])


def test_max_tokens_ends_with_finish_reason_length(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
        max_tokens=5,
        temperature=0,
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 5


def test_max_completion_tokens_is_preferred_over_max_tokens(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Count from one to fifty in words."}],
        max_tokens=40,
        max_completion_tokens=3,
        temperature=0,
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 3


def test_stop_string_ends_the_reply_before_it(client: openai.OpenAI, model_name: str) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Count from 1 to 10, separated by commas."}
    ]
    counting = {"grammar": 'root ::= [A-Za-z ]{0,20} "1, 2, 3, 4, 5" [0-9, ]{0,20}'}  # a 5 forced, not hoped for
    free = client.chat.completions.create(
        model=model_name, messages=messages, max_tokens=40, temperature=0, extra_body=counting
    )
    full = free.choices[0].message.content or ""
    assert "5" in full, full
    stopped = client.chat.completions.create(
        model=model_name, messages=messages, max_tokens=40, temperature=0, stop=["5"], extra_body=counting
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == full[: full.index("5")]


def test_greedy_decoding_gives_the_same_text_twice(client: openai.OpenAI, model_name: str) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name three colours."}]
    first = client.chat.completions.create(model=model_name, messages=messages, max_tokens=30, temperature=0)
    second = client.chat.completions.create(model=model_name, messages=messages, max_tokens=30, temperature=0)
    assert first.choices[0].message.content == second.choices[0].message.content


def test_same_seed_gives_the_same_sampled_text(client: openai.OpenAI, model_name: str) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Invent a name for a cat."}]
    texts = {
        client.chat.completions.create(model=model_name, messages=messages, max_tokens=16, temperature=1.0, seed=1234)
        .choices[0]
        .message.content
        for _ in range(2)
    }
    assert len(texts) == 1


def test_json_schema_output_parses_and_matches_the_schema(client: openai.OpenAI, model_name: str) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Describe a person called Ada who is 36, as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        max_tokens=60,
        temperature=0,
    )
    data = json.loads(reply.choices[0].message.content or "")
    jsonschema.validate(data, schema)


def test_json_object_output_parses(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "user", "content": "Give me a JSON object with a key colour."}],
        response_format={"type": "json_object"},
        max_tokens=40,
        temperature=0,
    )
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)


def test_timings_report_decode_speed(smollm2_server: Server, model_name: str) -> None:
    body = {"model": model_name, "messages": HELLO, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    timings = httpx.post(f"{smollm2_server.url}/v1/chat/completions", json=body, timeout=60).json()["timings"]
    assert timings["predicted_n"] == 16
    assert timings["predicted_per_second"] > 0
