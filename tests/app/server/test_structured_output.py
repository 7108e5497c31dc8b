"""Structured output on a real server with SmolLM2: schemas that once crashed the process are answered, a schema
that cannot be enforced is refused with a 400 naming it, and the server keeps serving either way."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema

from tests.app.server.conftest import Server

pytestmark = pytest.mark.model

SCHEMA_PARAM = "response_format.json_schema.schema"

# Each once killed the server with a segmentation fault (a GBNF grammar grown by recursion). Each prompt asks
# for something short, so that greedy output completes well within max_tokens. The string's first pick leads the
# next by 3.7 logits, and its closing quote by 1.7: "Reply with the word hello as a JSON string." had a start
# byte of an emoji 0.09 ahead of "{" on an AMD CPU, and the reply repeated the emoji to the token limit.
BOMBS: dict[str, tuple[dict[str, Any], str]] = {
    "string maxLength 20000": (
        {"type": "string", "maxLength": 20000},
        "What is the capital of France? Answer with its name only, as a JSON string.",
    ),
    "array maxItems 30000": ({"type": "array", "maxItems": 30000}, "Reply with a JSON array of the numbers 1, 2, 3."),
    "pattern a{0,20000}": ({"pattern": "^a{0,20000}$"}, 'Say "aaa".'),
}


def response_format(schema: dict[str, Any]) -> ResponseFormatJSONSchema:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def messages(prompt: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": prompt}]


def assert_serving(server: Server, client: openai.OpenAI, model_name: str) -> None:
    assert server.process.poll() is None, server.output()
    assert httpx.get(f"{server.url}/health", timeout=10).json()["status"] == "ok"
    reply = client.chat.completions.create(model=model_name, messages=messages("Hi"), max_tokens=4, temperature=0)
    assert reply.choices[0].message.content


@pytest.mark.parametrize("name", BOMBS)
def test_a_schema_bomb_is_answered_with_output_that_validates(
    client: openai.OpenAI, smollm2_server: Server, model_name: str, name: str
) -> None:
    schema, prompt = BOMBS[name]
    reply = client.chat.completions.create(
        model=model_name,
        messages=messages(prompt),
        response_format=response_format(schema),
        max_tokens=48,
        temperature=0,
    )
    content = reply.choices[0].message.content or ""
    assert reply.choices[0].finish_reason == "stop", content
    jsonschema.validate(json.loads(content), schema)
    assert_serving(smollm2_server, client, model_name)


def test_a_streamed_schema_bomb_ends_with_stop_when_the_grammar_completes(
    client: openai.OpenAI, smollm2_server: Server, model_name: str
) -> None:
    schema, prompt = BOMBS["string maxLength 20000"]
    chunks = list(
        client.chat.completions.create(
            model=model_name,
            messages=messages(prompt),
            response_format=response_format(schema),
            max_tokens=48,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},  # the end comes from the grammar, not from the model
        )
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(content), schema)
    assert_serving(smollm2_server, client, model_name)


def test_a_schema_too_complex_to_enforce_is_refused_naming_it(
    client: openai.OpenAI, smollm2_server: Server, model_name: str
) -> None:
    schema = {"type": "string", "pattern": "^((x{1000}){1000}){1000}$"}
    response = httpx.post(
        f"{smollm2_server.url}/v1/chat/completions",
        json={"model": model_name, "messages": messages("x"), "response_format": response_format(schema)},
        timeout=60,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == SCHEMA_PARAM
    assert "too many expressions" in error["message"]
    assert_serving(smollm2_server, client, model_name)


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"type": "string"}},
        {"type": "string", "pattern": "[[["},
        {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"$ref": "#/nope"}}}},
    ],
    ids=["unsupported keyword", "invalid regex", "dangling ref"],
)
def test_a_schema_that_cannot_be_enforced_answers_400_with_the_param(
    client: openai.OpenAI, smollm2_server: Server, model_name: str, schema: dict[str, Any]
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=model_name, messages=messages("x"), response_format=response_format(schema), max_tokens=8
        )
    assert caught.value.param == SCHEMA_PARAM
    assert_serving(smollm2_server, client, model_name)


def test_a_constraint_that_fails_mid_generation_fails_only_its_request(
    client: openai.OpenAI, smollm2_server: Server, model_name: str
) -> None:
    # Compiles (the first masks are cheap), then exhausts the lexer's budget after some dozens of a's.
    schema = {"type": "string", "pattern": "^(a{0,1000}){0,1000}$"}
    body = {
        "model": model_name,
        "messages": messages(f'Repeat exactly: "{"a" * 300}"'),
        "response_format": response_format(schema),
        "max_tokens": 64,
        "temperature": 0,
    }
    with ThreadPoolExecutor(2) as pool:
        other = pool.submit(
            client.chat.completions.create,
            model=model_name,
            messages=messages("Count from one to twenty."),
            max_tokens=32,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        failed = httpx.post(f"{smollm2_server.url}/v1/chat/completions", json=body, timeout=120)
        answered = other.result()
    assert failed.status_code == 500
    assert failed.json()["error"]["code"] == "generation_failed"
    assert "constraint failed" in failed.json()["error"]["message"]
    assert answered.choices[0].finish_reason == "length"
    assert answered.usage is not None and answered.usage.completion_tokens == 32
    assert_serving(smollm2_server, client, model_name)
