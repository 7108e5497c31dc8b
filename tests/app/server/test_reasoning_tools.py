"""Tools and structured output after a reasoning model's thinking, on OpenAI's chat route: a call that must be made
(``tool_choice`` required or named) and a ``response_format`` hold only the answer, so the model thinks freely
first and the call or JSON comes after its thinking; earlier turns' thinking goes back as the template wants it, and
the prompt cache still matches the next turn. The reasoning test model (tests/reasoning_model.py) never ends its
thinking itself: a budget ends it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.app.server.thinking import QUESTION, prompt_of, tokens_of

pytestmark = pytest.mark.model

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(smollm2_think: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_think.name, test_home, tmp_path_factory.mktemp("serve-think-tools"), "-np", "1") as running:
        yield running


def chat(server: Server, **fields: Any) -> dict[str, Any]:
    body = {"messages": ASK, "temperature": 0, "max_tokens": 60, **fields}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    choice: dict[str, Any] = reply.json()["choices"][0]
    return choice


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_required_call_comes_after_the_thinking(server: Server, choice: Any) -> None:
    answer = chat(server, tools=[WEATHER], tool_choice=choice, reasoning_budget_tokens=4)
    assert answer["finish_reason"] == "tool_calls"
    assert answer["message"]["reasoning_content"]
    assert answer["message"]["content"] is None
    (call,) = answer["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert set(json.loads(call["function"]["arguments"])) == {"city"}


def test_a_reply_cut_while_thinking_makes_no_call(server: Server) -> None:
    answer = chat(server, tools=[WEATHER], tool_choice="required", max_tokens=6)
    assert answer["finish_reason"] == "length"
    assert "tool_calls" not in answer["message"]
    assert answer["message"]["content"] == "" and answer["message"]["reasoning_content"]


def test_a_json_schema_holds_the_answer_not_the_thinking(server: Server) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}
    answer = chat(server, response_format=response_format, reasoning_budget_tokens=4, max_tokens=40)
    assert answer["message"]["reasoning_content"]
    assert set(json.loads(answer["message"]["content"])) == {"city"}


def test_thinking_switched_off_holds_the_call_from_the_first_token(server: Server) -> None:
    switch = {"chat_template_kwargs": {"enable_thinking": False}}
    answer = chat(server, tools=[WEATHER], tool_choice="required", **switch)
    assert answer["finish_reason"] == "tool_calls" and "reasoning_content" not in answer["message"]


def test_an_earlier_turns_thinking_is_dropped_as_the_template_drops_it_and_the_cache_still_serves(
    server: Server,
) -> None:
    first = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"messages": QUESTION, "temperature": 0, "max_tokens": 12, "reasoning_budget_tokens": 4},
        timeout=120,
    ).json()
    message = first["choices"][0]["message"]
    assert message["reasoning_content"]
    history = [*QUESTION, {"role": "assistant", **message}, {"role": "user", "content": "And of Germany?"}]
    without = [*QUESTION, {"role": "assistant", "content": message["content"]}, history[-1]]
    assert prompt_of(server, history) == prompt_of(server, without)  # the template drops earlier thinking
    second = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"messages": history, "temperature": 0, "max_tokens": 4, "reasoning_budget_tokens": 2},
        timeout=120,
    ).json()
    opened = len(tokens_of(server, "<think>\n"))  # the first prompt's end, which the next one has not
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= first["usage"]["prompt_tokens"] - opened
