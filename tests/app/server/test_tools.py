"""Function calling through a real server with the real SmolLM2, driven by the official openai and ollama
clients: a call the model must make always parses and names the function; earlier calls and the tools' answers
go back into the prompt; bad tool fields are 400s naming them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import ollama
import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionToolParam,
)

from tests.app.server.conftest import Server

pytestmark = pytest.mark.model

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The weather in a city", "parameters": WEATHER_SCHEMA},
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the project",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
]
WEATHER_CHOICE: ChatCompletionNamedToolChoiceParam = {"type": "function", "function": {"name": "get_weather"}}
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]


def function_calls(message: ChatCompletionMessage) -> list[ChatCompletionMessageFunctionToolCall]:
    calls = message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls)
    return [c for c in calls if isinstance(c, ChatCompletionMessageFunctionToolCall)]


def test_a_required_call_parses_and_names_a_function(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=80
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = function_calls(choice.message)
    assert len(calls) == 1 and calls[0].type == "function"
    assert calls[0].function.name in ("get_weather", "read_file")
    assert isinstance(json.loads(calls[0].function.arguments), dict)
    assert calls[0].id.startswith("call_")


def test_a_named_call_follows_that_functions_schema(client: openai.OpenAI, model_name: str) -> None:
    reply = client.chat.completions.create(
        model=model_name,
        messages=ASK,
        tools=TOOLS,
        tool_choice=WEATHER_CHOICE,
        temperature=0,
        max_tokens=80,
    )
    calls = function_calls(reply.choices[0].message)
    assert [c.function.name for c in calls] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER_SCHEMA)
    assert reply.choices[0].message.content is None


def test_a_streamed_call_arrives_as_openais_deltas(client: openai.OpenAI, model_name: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=model_name,
            messages=ASK,
            tools=TOOLS,
            tool_choice=WEATHER_CHOICE,
            temperature=0,
            max_tokens=80,
            stream=True,
        )
    )
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or []) if c.choices]
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "get_weather"
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    jsonschema.validate(json.loads(arguments), WEATHER_SCHEMA)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole = client.chat.completions.create(
        model=model_name,
        messages=ASK,
        tools=TOOLS,
        tool_choice=WEATHER_CHOICE,
        temperature=0,
        max_tokens=80,
    )
    assert json.loads(function_calls(whole.choices[0].message)[0].function.arguments) == json.loads(arguments)


def test_the_tools_answer_goes_back_and_the_model_replies_in_text(client: openai.OpenAI, model_name: str) -> None:
    messages: list[Any] = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
    ]
    reply = client.chat.completions.create(
        model=model_name, messages=messages, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=40
    )
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.choices[0].message.content
    assert reply.usage is not None
    plain = client.chat.completions.create(model=model_name, messages=ASK, temperature=0, max_tokens=1)
    assert plain.usage is not None
    assert reply.usage.prompt_tokens > plain.usage.prompt_tokens + 20  # the call and its answer are in the prompt


def test_ollamas_chat_takes_tools_and_earlier_calls(smollm2_server: Server, model_name: str) -> None:
    c = ollama.Client(host=smollm2_server.url, timeout=120)
    try:
        reply = c.chat(
            model=model_name,
            messages=[
                *ASK,
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
                },
                {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"},
            ],
            tools=TOOLS,
            options={"temperature": 0, "num_predict": 40},
        )
    finally:
        c.close()  # type: ignore[no-untyped-call]
    assert reply.done_reason in ("stop", "length")
    for call in reply.message.tool_calls or []:  # a call, if the model makes one, is one of the tools
        assert call.function.name in ("get_weather", "read_file")
        assert isinstance(call.function.arguments, dict)
    assert reply.message.content or reply.message.tool_calls


BAD: list[tuple[dict[str, Any], str]] = [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools"),
    ({"tools": "get_weather"}, "tools"),
    ({"tools": [TOOLS[0]] * 129}, "tools"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
]


@pytest.mark.parametrize(("extra", "param"), BAD, ids=[f"{p}-{i}" for i, (_, p) in enumerate(BAD)])
def test_bad_tool_fields_are_400s_naming_them(
    smollm2_server: Server, model_name: str, extra: dict[str, Any], param: str
) -> None:
    body = {"model": model_name, "messages": ASK, **extra}
    reply = httpx.post(f"{smollm2_server.url}/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert (reply.json()["error"]["param"] or "").startswith(param)


def test_a_call_whose_arguments_are_not_json_is_a_400(smollm2_server: Server, model_name: str) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{oops"}}
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]}]
    reply = httpx.post(
        f"{smollm2_server.url}/v1/chat/completions", json={"model": model_name, "messages": messages}, timeout=60
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"].startswith("messages.tool_calls")
