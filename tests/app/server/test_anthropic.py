"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through a real server with the real SmolLM2,
driven by the official anthropic client: the same greedy text as the OpenAI route, streamed or not; stop
sequences, max_tokens and tool calls read back as Anthropic's stop reasons; usage that adds up to count_tokens;
bad input refused in Anthropic's error shape naming the field. In process, on an idle backend: the key as
``x-api-key``, a full queue's 503 with Retry-After, an error after a stream began."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest
from anthropic.types import MessageParam, ToolChoiceParam, ToolParam, ToolUseBlock
from pydantic import BaseModel
from starlette.testclient import TestClient

from localinfer.app.server.app import create_app
from localinfer.app.server.core.dialect import Dialect, dialect_for
from localinfer.app.server.errors import error_for, headers_for
from localinfer.app.server.guard import AccessPolicy
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.errors import GenerationFailed, QueueFull
from localinfer.models.library import ModelLibrary, ServedModels
from localinfer.models.store import Manifest, ModelStore
from tests.app.server.conftest import Server, serving
from tests.idle_backend import IdleBackend

GREEDY = {"temperature": 0}  # not a keyword of the client's create(): sent as it is, in extra_body
SYSTEM = "You are a helpful assistant. Answer in full sentences."
ASK: list[MessageParam] = [{"role": "user", "content": "What is the capital of France? Tell me about it."}]
STORY: list[MessageParam] = [{"role": "user", "content": "Write a long story about a dragon."}]
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[ToolParam] = [
    {"name": "get_weather", "description": "The weather in a city", "input_schema": WEATHER_SCHEMA},
    {
        "name": "read_file",
        "description": "Read a file of the project",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
]
WEATHER_CHOICE: ToolChoiceParam = {"type": "tool", "name": "get_weather"}
WEATHER_ASK: list[MessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]
KEY = "anthropic-test-key"


@pytest.fixture(scope="module")
def claude(smollm2_server: Server) -> Iterator[anthropic.Anthropic]:
    c = anthropic.Anthropic(base_url=smollm2_server.url, api_key="unused", max_retries=0, timeout=120)
    yield c
    c.close()


def error_of(exc: anthropic.APIStatusError) -> dict[str, Any]:
    """The body's ``error`` object, after checking the body is Anthropic's error shape."""
    body = exc.body
    assert isinstance(body, dict) and body["type"] == "error" and set(body["error"]) == {"type", "message"}
    error: dict[str, Any] = body["error"]
    return error


def tool_uses(message: anthropic.types.Message) -> list[ToolUseBlock]:
    return [block for block in message.content if isinstance(block, ToolUseBlock)]


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


# -- answers -----------------------------------------------------------------------------------------------------


@pytest.mark.model
def test_a_message_is_anthropics_shape_with_the_openai_routes_text_and_usage_that_adds_up(
    claude: anthropic.Anthropic, client: openai.OpenAI, model_name: str
) -> None:
    message = claude.messages.create(model=model_name, system=SYSTEM, messages=ASK, max_tokens=48, extra_body=GREEDY)
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == model_name
    assert [block.type for block in message.content] == ["text"]
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    assert 0 < message.usage.output_tokens <= 48
    counted = claude.messages.count_tokens(model=model_name, system=SYSTEM, messages=ASK)
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == counted.input_tokens

    same = client.chat.completions.create(
        model=model_name,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": str(ASK[0]["content"])}],
        max_tokens=48,
        temperature=0,
    )
    assert text_of(message) == same.choices[0].message.content
    assert same.usage is not None
    assert (same.usage.prompt_tokens, same.usage.completion_tokens) == (
        counted.input_tokens,
        message.usage.output_tokens,
    )
    assert message.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[same.choices[0].finish_reason]


@pytest.mark.model
def test_a_stream_collects_to_the_non_streamed_message(claude: anthropic.Anthropic, model_name: str) -> None:
    whole = claude.messages.create(model=model_name, system=SYSTEM, messages=ASK, max_tokens=40, extra_body=GREEDY)
    with claude.messages.stream(
        model=model_name, system=SYSTEM, messages=ASK, max_tokens=40, extra_body=GREEDY
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text_of(whole) and streamed.strip()
    assert [block.type for block in final.content] == [block.type for block in whole.content] == ["text"]
    assert (final.stop_reason, final.stop_sequence) == (whole.stop_reason, whole.stop_sequence)
    assert final.usage.output_tokens == whole.usage.output_tokens
    prompt = whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == prompt


@pytest.mark.model
def test_the_stream_is_named_events_in_anthropics_order(smollm2_server: Server, model_name: str) -> None:
    body = {"model": model_name, "messages": STORY, "max_tokens": 6, "stream": True, **GREEDY}
    with httpx.stream("POST", f"{smollm2_server.url}/v1/messages", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines[0::2]]
    data = [json.loads(line.removeprefix("data: ")) for line in lines[1::2]]
    assert all(line.startswith("event: ") for line in lines[0::2])
    assert [d["type"] for d in data] == names  # each event's data says its name again
    assert names[:3] == ["message_start", "content_block_start", "content_block_delta"]  # no ping: llama-server's
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    assert data[1]["content_block"] == {"type": "text", "text": ""}
    assert all(d["delta"]["type"] == "text_delta" and d["index"] == 0 for d in data[2:-3])
    assert data[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert data[-2]["usage"]["output_tokens"] == 6
    assert data[0]["message"]["content"] == [] and data[0]["message"]["stop_reason"] is None


@pytest.mark.model
def test_a_stop_sequence_ends_the_answer_and_is_named(claude: anthropic.Anthropic, model_name: str) -> None:
    free = text_of(claude.messages.create(model=model_name, messages=STORY, max_tokens=40, extra_body=GREEDY))
    word = next(w for w in free.split()[3:] if len(w) >= 4 and w.isalpha())
    stopped = claude.messages.create(
        model=model_name, messages=STORY, max_tokens=40, stop_sequences=[word], extra_body=GREEDY
    )
    assert stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == word
    assert text_of(stopped) == free[: free.index(word)]


@pytest.mark.model
def test_max_tokens_ends_with_max_tokens(claude: anthropic.Anthropic, model_name: str) -> None:
    message = claude.messages.create(model=model_name, messages=STORY, max_tokens=3, extra_body=GREEDY)
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.output_tokens == 3
    assert text_of(message).strip()


# -- tools --------------------------------------------------------------------------------------------------------


@pytest.mark.model
def test_a_named_tool_is_called_with_input_that_follows_its_schema(
    claude: anthropic.Anthropic, model_name: str
) -> None:
    message = claude.messages.create(
        model=model_name,
        messages=WEATHER_ASK,
        tools=TOOLS,
        tool_choice=WEATHER_CHOICE,
        max_tokens=80,
        extra_body=GREEDY,
    )
    assert message.stop_reason == "tool_use"
    calls = tool_uses(message)
    assert [c.name for c in calls] == ["get_weather"] and calls[0].id.startswith("toolu_")
    jsonschema.validate(calls[0].input, WEATHER_SCHEMA)
    assert not text_of(message)

    with claude.messages.stream(
        model=model_name,
        messages=WEATHER_ASK,
        tools=TOOLS,
        tool_choice=WEATHER_CHOICE,
        max_tokens=80,
        extra_body=GREEDY,
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert [d.type for d in deltas] == ["input_json_delta"]
    assert final.stop_reason == "tool_use"
    assert [(c.name, c.input) for c in tool_uses(final)] == [("get_weather", calls[0].input)]


@pytest.mark.model
def test_any_tool_with_parallel_calls_disabled_gives_one_call(claude: anthropic.Anthropic, model_name: str) -> None:
    message = claude.messages.create(
        model=model_name,
        messages=WEATHER_ASK,
        tools=TOOLS,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        max_tokens=80,
        extra_body=GREEDY,
    )
    assert message.stop_reason == "tool_use"
    calls = tool_uses(message)
    assert len(calls) == 1 and calls[0].name in ("get_weather", "read_file")
    assert isinstance(calls[0].input, dict)


@pytest.mark.model
def test_a_tool_result_goes_back_into_the_prompt(claude: anthropic.Anthropic, model_name: str) -> None:
    def turns(result: str, *, is_error: bool = False) -> list[MessageParam]:
        return [
            *WEATHER_ASK,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": result, "is_error": is_error},
                    {"type": "text", "text": "Thanks. Answer in one sentence."},
                ],
            },
        ]

    sunny = turns("18 degrees and sunny")
    message = claude.messages.create(
        model=model_name, messages=sunny, tools=TOOLS, tool_choice={"type": "none"}, max_tokens=40, extra_body=GREEDY
    )
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert text_of(message).strip() and not tool_uses(message)

    def count(messages: list[MessageParam], **extra: Any) -> int:
        return claude.messages.count_tokens(model=model_name, messages=messages, **extra).input_tokens

    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == count(
        sunny, tools=TOOLS, tool_choice={"type": "none"}
    )
    longer = turns("18 degrees and sunny, with a light wind from the west and no rain expected before the evening")
    assert count(longer) > count(sunny) > count(WEATHER_ASK) + 10  # the call, its answer and the text are in it
    assert count(turns("18 degrees and sunny", is_error=True)) > count(sunny)  # read as "Error: ..."
    assert count(WEATHER_ASK, tools=TOOLS) > count(WEATHER_ASK) + 20  # the tools are described to the model
    assert count(WEATHER_ASK, tools=TOOLS, tool_choice={"type": "none"}) == count(WEATHER_ASK)  # none offered


class City(BaseModel):
    name: str
    country: str


@pytest.mark.model
def test_an_output_format_constrains_the_answer(claude: anthropic.Anthropic, model_name: str) -> None:
    parsed = claude.messages.parse(
        model=model_name,
        messages=[{"role": "user", "content": "Name a city in Japan as JSON."}],
        output_format=City,
        max_tokens=60,
        extra_body=GREEDY,
    )
    assert parsed.stop_reason == "end_turn"
    assert isinstance(parsed.parsed_output, City) and parsed.parsed_output.name


# -- refusals -----------------------------------------------------------------------------------------------------


def image_block() -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]}
BAD: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": None}, "max_tokens: Field required"),
    ({"max_tokens": "many"}, "max_tokens: Input should be a valid integer"),
    ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
    ({"messages": "hello"}, "messages: Input should be a valid list"),
    ({"messages": [{"role": "system", "content": "hi"}]}, "messages.0.role: Input should be 'user' or 'assistant'"),
    ({"temperature": 1.5}, "temperature: Input should be less than or equal to 1"),
    ({"stop_sequences": "END"}, "stop_sequences: Input should be a valid list"),
    # the image's bytes are read at the edge, before any model is asked: this one is a PNG signature alone
    (
        {"messages": [{"role": "user", "content": [image_block()]}]},
        "messages.0.content.0.source.data: the image/png image is truncated",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, image_block()]}]},
        "messages.0.content.1.source.data: the image/png image is truncated",
    ),
    (
        {
            "messages": [
                *WEATHER_ASK,
                CALL,
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [image_block()]}]},
            ]
        },
        "messages.2.content.0.content.0: content blocks of type 'image' are not supported here",
    ),
    ({"system": [image_block()]}, "system.0: content blocks of type 'image' are not supported here"),
    ({"tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name: tool_choice names 'nope'"),
    ({"tool_choice": {"type": "any"}}, "tool_choice: tool_choice any needs tools to choose from"),
    ({"tools": TOOLS, "tool_choice": {"type": "sometimes"}}, "tool_choice.type: Input should be"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type: the tool type"),
    ({"tools": [{"name": "get_weather"}]}, "tools.0.input_schema: a tool needs its input_schema"),
    ({"tools": [{"name": "bad name", "input_schema": {}}]}, "tools.0.name: String should match pattern"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "tools: tool names must be unique"),
    ({"mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}]}, "mcp_servers: MCP servers"),
]


@pytest.mark.model
@pytest.mark.parametrize(("extra", "message"), BAD, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(BAD)])
def test_bad_input_is_a_400_in_anthropics_shape_naming_the_field(
    smollm2_server: Server, model_name: str, extra: dict[str, Any], message: str
) -> None:
    body = {k: v for k, v in {"model": model_name, "messages": ASK, "max_tokens": 8, **extra}.items() if v is not None}
    reply = httpx.post(f"{smollm2_server.url}/v1/messages", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["type"] == "error"
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert reply.json()["error"]["message"].startswith(message), reply.json()


WRONG_VALUES: list[Any] = [None, True, -1, 10**30, "x" * 5000, [], {}, [[[[]]]], {"a": {"b": [1, "2"]}}]
FIELDS = [
    "model", "messages", "system", "max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "stream",
    "tools", "tool_choice", "thinking", "metadata", "output_config", "output_format", "keep_alive",
]  # fmt: skip


@pytest.mark.model
def test_a_wrong_type_in_any_field_is_never_a_5xx(smollm2_server: Server, model_name: str) -> None:
    # a huge max_tokens is served (until the context is full): the stop sequence ends that answer at once too
    base = {"model": model_name, "messages": STORY, "max_tokens": 2, "stop_sequences": ["e"]}
    with httpx.Client(base_url=smollm2_server.url, timeout=120) as http:
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            for field in FIELDS:
                for value in WRONG_VALUES:
                    reply = http.post(path, json={**base, field: value})
                    assert reply.status_code < 500, (path, field, value, reply.text[:300])
                    if reply.status_code >= 400:
                        assert reply.json()["type"] == "error", reply.text[:300]
                        assert set(reply.json()["error"]) == {"type", "message"}
                    if path.endswith("count_tokens"):  # a block's other fields are ignored (counted: no generation)
                        block = {"type": "text", "text": "Hi", field: value}
                        reply = http.post(path, json={**base, "messages": [{"role": "user", "content": [block]}]})
                        assert reply.status_code == 200, (path, field, value, reply.text[:300])
        assert http.get("/health").status_code == 200


@pytest.mark.model
def test_the_client_raises_on_an_image_url_and_an_unknown_model(claude: anthropic.Anthropic, model_name: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(
            model=model_name,
            max_tokens=8,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in this picture?"},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
                    ],
                }
            ],
        )
    assert error_of(bad.value) == {
        "type": "invalid_request_error",
        "message": "messages.0.content.1.source.url: image URLs are not fetched by this server; send the image as a "
        "data: URI or base64, or start the server with --allow-image-urls",
    }
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="no-such-model", max_tokens=8, messages=ASK)
    assert error_of(missing.value)["type"] == "not_found_error"
    assert "model 'no-such-model' not found" in error_of(missing.value)["message"]
    with pytest.raises(anthropic.NotFoundError) as not_counted:
        claude.messages.count_tokens(model="no-such-model", messages=ASK)
    assert error_of(not_counted.value)["type"] == "not_found_error"


@pytest.mark.model
def test_a_request_naming_no_model_goes_to_the_default_one(smollm2_server: Server, model_name: str) -> None:
    body = {"messages": STORY, "max_tokens": 4, **GREEDY}
    unnamed = httpx.post(f"{smollm2_server.url}/v1/messages", json=body, timeout=60).json()
    named = httpx.post(f"{smollm2_server.url}/v1/messages", json={**body, "model": model_name}, timeout=60).json()
    assert unnamed["model"] == model_name and unnamed["content"] == named["content"]
    counted = httpx.post(f"{smollm2_server.url}/v1/messages/count_tokens", json={"messages": STORY}, timeout=60)
    assert counted.json() == {
        "input_tokens": named["usage"]["input_tokens"] + named["usage"]["cache_read_input_tokens"]
    }


# -- the key ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("serve-anthropic-keyed")
    with serving(smollm2.name, test_home, log_dir, "--ctx-size", "512", "--api-key", KEY) as server:
        yield server


@pytest.mark.model
def test_a_keyed_server_takes_the_key_as_x_api_key(keyed_server: Server, model_name: str) -> None:
    keyed = anthropic.Anthropic(
        base_url=keyed_server.url, api_key=None, auth_token=None, default_headers={"x-api-key": KEY}, max_retries=0
    )
    wrong = anthropic.Anthropic(
        base_url=keyed_server.url, api_key=None, auth_token=None, default_headers={"x-api-key": "nope"}, max_retries=0
    )
    try:
        message = keyed.messages.create(model=model_name, messages=STORY, max_tokens=2, extra_body=GREEDY)
        assert message.usage.output_tokens == 2
        with pytest.raises(anthropic.AuthenticationError) as refused:
            wrong.messages.create(model=model_name, messages=STORY, max_tokens=2)
        assert error_of(refused.value) == {
            "type": "authentication_error",
            "message": "missing or wrong API key; send the header 'Authorization: Bearer <key>' with the server's key",
        }
    finally:
        keyed.close()
        wrong.close()
    listed = httpx.get(f"{keyed_server.url}/v1/models", headers={"x-api-key": KEY}, timeout=30)
    assert listed.status_code == 200  # on every route, as llama-server takes it
    assert httpx.get(f"{keyed_server.url}/v1/models", timeout=30).status_code == 401


# -- in process, on an idle backend -------------------------------------------------------------------------------


@pytest.fixture
def idle_app(tmp_path: Path) -> Iterator[tuple[TestClient, Engine]]:
    """The app in process on an idle stand-in backend, with a key, reached as http://127.0.0.1:8080."""
    settings = Settings(home=tmp_path, discover=False)
    engine = Engine(settings, ServedModels(ModelLibrary(ModelStore(settings.models_dir), None)), IdleBackend)
    app = create_app(engine, access=AccessPolicy(api_key=KEY))
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        yield client, engine


MESSAGE = {"model": "any", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        ("/v1/messages", Dialect.ANTHROPIC),
        ("/v1/messages/count_tokens", Dialect.ANTHROPIC),
        ("/v1/messages/", Dialect.ANTHROPIC),
        ("/v1/messagesx", Dialect.OPENAI),
        ("/v1/chat/completions", Dialect.OPENAI),
    ],
)
def test_messages_paths_speak_anthropic(path: str, dialect: Dialect) -> None:
    assert dialect_for(path) is dialect


def test_a_full_queue_is_overloaded_with_retry_after_in_anthropics_shape() -> None:
    exc = QueueFull("every slot is busy and the queue is full")
    assert error_for(Dialect.ANTHROPIC, exc) == (
        503,
        {"type": "error", "error": {"type": "overloaded_error", "message": "every slot is busy and the queue is full"}},
    )
    assert headers_for(exc) == {"Retry-After": "1"}


def test_the_key_is_taken_as_x_api_key_or_bearer_and_refused_in_anthropics_shape(
    idle_app: tuple[TestClient, Engine],
) -> None:
    client, _ = idle_app
    refused = client.post("/v1/messages", json=MESSAGE)
    assert refused.status_code == 401
    assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "authentication_error"
    assert client.post("/v1/messages", json=MESSAGE, headers={"x-api-key": "wrong"}).status_code == 401
    for header in ({"x-api-key": KEY}, {"Authorization": f"Bearer {KEY}"}):
        unnamed = client.post("/v1/messages", json={**MESSAGE, "model": ""}, headers=header)
        assert unnamed.status_code == 400  # past the key: the body is read, and it names no model
        assert unnamed.json()["error"]["type"] == "invalid_request_error"
        assert unnamed.json()["error"]["message"].startswith("model: the request names no model")
    assert client.get("/v1/models", headers={"x-api-key": KEY}).status_code == 200


def test_a_503_keeps_its_retry_after_and_an_error_after_the_stream_began_is_an_error_event(
    idle_app: tuple[TestClient, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, engine = idle_app
    auth = {"x-api-key": KEY}

    async def full(request: object) -> AsyncIterator[Any]:
        raise QueueFull("every slot is busy and the queue is full")
        yield  # pragma: no cover

    monkeypatch.setattr(engine, "chat", full)
    for stream in (False, True):
        refused = client.post("/v1/messages", json={**MESSAGE, "stream": stream}, headers=auth)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"] == {
            "type": "overloaded_error",
            "message": "every slot is busy and the queue is full",
        }

    async def failing(request: object) -> AsyncIterator[Any]:
        from localinfer.types import TokenChunk

        yield TokenChunk("Hel")
        raise GenerationFailed("the backend failed")

    monkeypatch.setattr(engine, "chat", failing)
    response = client.post("/v1/messages", json={**MESSAGE, "stream": True}, headers=auth)
    assert response.status_code == 200
    events = [block.split("\n") for block in response.text.strip().split("\n\n")]
    assert [e[0] for e in events][-3:] == ["event: content_block_start", "event: content_block_delta", "event: error"]
    assert json.loads(events[-1][1].removeprefix("data: ")) == {
        "type": "error",
        "error": {"type": "api_error", "message": "the backend failed"},
    }


def test_unknown_routes_and_methods_under_messages_answer_in_anthropics_shape(
    idle_app: tuple[TestClient, Engine],
) -> None:
    client, _ = idle_app
    auth = {"x-api-key": KEY}
    missing = client.post("/v1/messages/batches", json={}, headers=auth)
    assert missing.status_code == 404
    assert missing.json() == {"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}}
    wrong_method = client.get("/v1/messages", headers=auth)
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["type"] == "invalid_request_error"
