"""OpenAI's Responses API (``/v1/responses``, ``/v1/responses/input_tokens``, and both without ``/v1``) through a
real server with the real SmolLM2, driven by the official openai client; its shapes and events compared with the
real llama-server's on the same model and the same requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseStreamEvent,
    ResponseTextConfigParam,
)

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server
from tests.capital_answer import CAPITAL_SCHEMA, capital_in
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

ASK = "What is the capital of France?"
INSTRUCTIONS = "Answer in one word."  # SmolLM2 runs on without it
WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": WEATHER_PARAMETERS,
    "strict": True,
}
GREEDY: dict[str, Any] = {"temperature": 0, "max_output_tokens": 60}
# The answer held to a choice of capitals as JSON (tests/capital_answer.py): free greedy text differs between CPUs.
CAPITAL_TEXT: ResponseTextConfigParam = {"format": {"type": "json_schema", "name": "capital", "schema": CAPITAL_SCHEMA}}
TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]
# A conversation as Codex sends it back: a developer turn, the user's, the assistant's text and its call, the answer.
CONVERSATION: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
    },
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 24 degrees."},
]
# Turns without calls, for llama-server: on SmolLM2, whose template knows no tools, it leaves tools and calls out.
TURNS: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be brief."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello."}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi! How can I help?"}]},
    {"role": "user", "content": ASK},
]
CHAT_CONVERSATION: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees."},
]


def events_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The named server-sent events of a whole stream: (event name, data)."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def streamed(url: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}, timeout=120) as answer:
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        return events_of(answer.read().decode())


def text_body(model: str) -> dict[str, Any]:
    return {"model": model, "input": ASK, "instructions": INSTRUCTIONS, **GREEDY, "max_output_tokens": 200}


@pytest.fixture(scope="module")
def llama_answers(smollm2: Manifest, model_name: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What llama-server answers on SmolLM2; it runs only while it is asked."""
    answers: dict[str, Any] = {}
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "2048", "-np", "1") as url:
        answers["response"] = httpx.post(f"{url}/v1/responses", json=text_body(model_name), timeout=120).json()
        answers["text-events"] = streamed(url, text_body(model_name))
        count = {"model": model_name, "input": TURNS, "instructions": INSTRUCTIONS}
        answers["input_tokens"] = httpx.post(f"{url}/v1/responses/input_tokens", json=count, timeout=120).json()
    return answers


@pytest.fixture(scope="module")
def root_client(smollm2_server: Server) -> Iterator[openai.OpenAI]:
    """The openai client pointed at the bare address, as llama-server's docs point it."""
    c = openai.OpenAI(base_url=smollm2_server.url, api_key="unused", max_retries=0, timeout=120)
    yield c
    c.close()


def message_of(response: Response) -> ResponseOutputMessage:
    messages = [item for item in response.output if isinstance(item, ResponseOutputMessage)]
    assert len(messages) == 1, response.output
    return messages[0]


def calls_of(response: Response) -> list[ResponseFunctionToolCall]:
    return [item for item in response.output if isinstance(item, ResponseFunctionToolCall)]


# -- answers --------------------------------------------------------------------------------------------------------


def test_a_response_holds_the_answer_as_a_message_of_output_text(client: openai.OpenAI, model_name: str) -> None:
    response = client.responses.create(
        model=model_name, input=ASK, instructions=INSTRUCTIONS, text=CAPITAL_TEXT, **GREEDY
    )
    assert (response.object, response.status, response.model) == ("response", "completed", model_name)
    assert response.id.startswith("resp_") and response.created_at > 0
    message = message_of(response)
    assert (message.type, message.role, message.status) == ("message", "assistant", "completed")
    assert [part.type for part in message.content] == ["output_text"]
    assert capital_in(response.output_text) == "Paris"


def test_usage_counts_the_prompt_as_input_tokens_counts_it(client: openai.OpenAI, model_name: str) -> None:
    response = client.responses.create(model=model_name, input=ASK, instructions=INSTRUCTIONS, **GREEDY)
    counted = client.responses.input_tokens.count(model=model_name, input=ASK, instructions=INSTRUCTIONS)
    assert counted.object == "response.input_tokens"
    assert response.usage is not None
    assert response.usage.input_tokens == counted.input_tokens > 10
    assert response.usage.output_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


def test_instructions_are_a_system_turn(client: openai.OpenAI, model_name: str) -> None:
    response = client.responses.create(model=model_name, input=ASK, instructions=INSTRUCTIONS, **GREEDY)
    chat = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": ASK}],
        temperature=0,
        max_tokens=60,
    )
    assert response.output_text == chat.choices[0].message.content
    assert response.instructions == INSTRUCTIONS


def test_input_items_are_the_turns_a_chat_completion_of_them_is(smollm2_server: Server, model_name: str) -> None:
    ours = httpx.post(
        f"{smollm2_server.url}/v1/responses/input_tokens",
        json={"model": model_name, "input": CONVERSATION, "tools": [WEATHER]},
        timeout=120,
    )
    function = {"name": WEATHER["name"], "description": WEATHER.get("description"), "parameters": WEATHER_PARAMETERS}
    chat_tool = {"type": "function", "function": function}
    chat = httpx.post(
        f"{smollm2_server.url}/v1/chat/completions/input_tokens",
        json={"model": model_name, "messages": CHAT_CONVERSATION, "tools": [chat_tool]},
        timeout=120,
    )
    assert ours.status_code == chat.status_code == 200, (ours.text, chat.text)
    assert ours.json() == chat.json() and chat.json()["input_tokens"] > 30


def test_an_answer_cut_by_max_output_tokens_is_incomplete(client: openai.OpenAI, model_name: str) -> None:
    response = client.responses.create(
        model=model_name, input=ASK, instructions=INSTRUCTIONS, temperature=0, max_output_tokens=3
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 3
    assert message_of(response).status == "incomplete"


def test_store_is_accepted_and_changes_nothing(client: openai.OpenAI, model_name: str) -> None:
    plain = client.responses.create(model=model_name, input=ASK, instructions=INSTRUCTIONS, **GREEDY)
    stored = client.responses.create(model=model_name, input=ASK, instructions=INSTRUCTIONS, store=True, **GREEDY)
    assert stored.status == "completed" and stored.output_text == plain.output_text


def test_text_format_json_schema_gives_json_that_follows_it(client: openai.OpenAI, model_name: str) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "country": {"type": "string", "maxLength": 20}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        model=model_name,
        input="Name a city and its country.",
        text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}},
        temperature=0,
        max_output_tokens=80,
    )
    jsonschema.validate(json.loads(response.output_text), schema)
    assert response.text is not None and response.text.format is not None
    assert response.text.format.type == "json_schema"


# -- function calls -------------------------------------------------------------------------------------------------


def test_a_tool_choice_naming_a_function_gives_a_call_to_it(client: openai.OpenAI, model_name: str) -> None:
    response = client.responses.create(
        model=model_name,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
    )
    assert response.status == "completed"
    calls = calls_of(response)
    assert [(c.type, c.name, c.status) for c in calls] == [("function_call", "get_weather", "completed")]
    assert calls[0].call_id.startswith("call_") and calls[0].id is not None and calls[0].id.startswith("fc_")
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER_PARAMETERS)


def test_a_streamed_call_sends_its_arguments_in_events(client: openai.OpenAI, model_name: str) -> None:
    events = list(
        client.responses.create(
            model=model_name,
            input="What is the weather in Paris?",
            tools=[WEATHER],
            tool_choice={"type": "function", "name": "get_weather"},
            temperature=0,
            stream=True,
        )
    )
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added, delta, done, item_done, completed = events[2:]
    assert added.type == "response.output_item.added" and isinstance(added.item, ResponseFunctionToolCall)
    assert (added.item.name, added.item.arguments, added.item.status) == ("get_weather", "", "in_progress")
    assert delta.type == "response.function_call_arguments.delta"
    assert done.type == "response.function_call_arguments.done" and done.arguments == delta.delta
    assert item_done.type == "response.output_item.done" and isinstance(item_done.item, ResponseFunctionToolCall)
    assert item_done.item.arguments == done.arguments and item_done.item.call_id == added.item.call_id
    assert completed.type == "response.completed"
    assert calls_of(completed.response) == [item_done.item]
    jsonschema.validate(json.loads(done.arguments), WEATHER_PARAMETERS)


# -- streams --------------------------------------------------------------------------------------------------------


def test_a_streamed_response_sends_the_events_of_its_text_in_order(client: openai.OpenAI, model_name: str) -> None:
    whole = client.responses.create(model=model_name, input=ASK, instructions=INSTRUCTIONS, **GREEDY)
    events: list[ResponseStreamEvent] = list(
        client.responses.create(model=model_name, input=ASK, instructions=INSTRUCTIONS, stream=True, **GREEDY)
    )
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas > 1 and kinds == TEXT_EVENTS[:4] + ["response.output_text.delta"] * deltas + TEXT_EVENTS[5:]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-4]
    assert done.type == "response.output_text.done" and done.text == text == whole.output_text
    created, completed = events[0], events[-1]
    assert created.type == "response.created" and created.response.status == "in_progress"
    assert completed.type == "response.completed" and completed.response.id == created.response.id
    assert completed.response.output_text == text
    assert completed.response.usage is not None and whole.usage is not None
    assert completed.response.usage.output_tokens == whole.usage.output_tokens


def test_routes_without_v1_answer_as_with_it(root_client: openai.OpenAI, model_name: str) -> None:
    response = root_client.responses.create(
        model=model_name, input=ASK, instructions=INSTRUCTIONS, text=CAPITAL_TEXT, **GREEDY
    )
    assert response.status == "completed" and capital_in(response.output_text) == "Paris"
    counted = root_client.responses.input_tokens.count(model=model_name, input=ASK)
    assert counted.input_tokens > 5


def test_a_request_naming_no_model_gets_the_default_one(smollm2_server: Server, model_name: str) -> None:
    answer = httpx.post(
        f"{smollm2_server.url}/v1/responses", json={"input": ASK, "instructions": INSTRUCTIONS, **GREEDY}, timeout=120
    )
    assert answer.status_code == 200 and answer.json()["model"] == model_name


# -- what cannot be honoured ----------------------------------------------------------------------------------------

REFUSED = [
    ({"input": ASK, "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": ASK, "conversation": "conv_1"}, "conversation"),
    ({"input": ASK, "background": True}, "background"),
    ({"input": ASK, "prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"input": ASK, "tools": [WEATHER, {"type": "web_search"}]}, "tools.1"),
    ({"input": ASK, "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools.0"),
    ({"input": ASK, "tools": [WEATHER], "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"input": ASK, "tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}}, "tool_choice"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
        "input.0.content.0",
    ),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}, "input.0.content.0"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]}, "input.0.arguments"),
    ({"input": ASK, "include": ["message.output_text.logprobs"]}, "include"),
    ({"input": ASK, "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({}, "input"),
    ({"input": ASK, "n": 2}, "n"),
]


@pytest.mark.parametrize(("body", "param"), REFUSED, ids=[param for _, param in REFUSED])
@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/input_tokens"])
def test_what_cannot_be_honoured_is_a_400_naming_the_field(
    smollm2_server: Server, model_name: str, path: str, body: dict[str, Any], param: str
) -> None:
    answer = httpx.post(f"{smollm2_server.url}{path}", json={"model": model_name, **body}, timeout=120)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_the_openai_client_raises_bad_request_for_a_built_in_tool(client: openai.OpenAI, model_name: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model_name, input=ASK, tools=[{"type": "web_search"}])
    assert "built-in tools" in caught.value.message


# -- as llama-server answers ------------------------------------------------------------------------------------------


def fields(value: Any) -> Any:
    """The field names of ``value``, nested; a list's items each."""
    if isinstance(value, dict):
        return {key: fields(item) for key, item in value.items()}
    if isinstance(value, list):
        return [fields(item) for item in value]
    return None


def holds(ours: Any, theirs: Any) -> bool:
    """Whether ``ours`` has every field ``theirs`` has, nested (lists compared item by item)."""
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and all(key in ours and holds(ours[key], theirs[key]) for key in theirs)
    if isinstance(theirs, list):
        return isinstance(ours, list) and len(ours) == len(theirs) and all(map(holds, ours, theirs))
    return True


def test_a_response_has_every_field_llama_servers_has(
    llama_answers: dict[str, Any], smollm2_server: Server, model_name: str
) -> None:
    ours = httpx.post(f"{smollm2_server.url}/v1/responses", json=text_body(model_name), timeout=120).json()
    theirs = llama_answers["response"]
    assert holds(ours, theirs), (fields(ours), fields(theirs))
    assert (ours["object"], ours["status"]) == (theirs["object"], theirs["status"]) == ("response", "completed")
    assert [item["type"] for item in ours["output"]] == [item["type"] for item in theirs["output"]] == ["message"]


def test_a_streamed_text_sends_the_events_llama_server_sends(
    llama_answers: dict[str, Any], smollm2_server: Server, model_name: str
) -> None:
    ours = streamed(smollm2_server.url, text_body(model_name))
    theirs = llama_answers["text-events"]
    assert [name for name, _ in theirs if name != "response.output_text.delta"] == [
        name for name, _ in ours if name != "response.output_text.delta"
    ]
    assert [name for name, _ in ours if name != "response.output_text.delta"] == [
        kind for kind in TEXT_EVENTS if kind != "response.output_text.delta"
    ]
    by_name = {name: data for name, data in ours}
    for name, data in theirs:
        assert holds(by_name[name], data), (name, fields(by_name[name]), fields(data))
    assert all(name == data["type"] for name, data in ours)


def test_input_tokens_counts_the_prompt_as_llama_server_does(
    llama_answers: dict[str, Any], smollm2_server: Server, model_name: str
) -> None:
    body = {"model": model_name, "input": TURNS, "instructions": INSTRUCTIONS}
    for path in ("/v1/responses/input_tokens", "/responses/input_tokens"):
        ours = httpx.post(f"{smollm2_server.url}{path}", json=body, timeout=120)
        assert ours.status_code == 200 and ours.json() == llama_answers["input_tokens"]
