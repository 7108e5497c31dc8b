"""Several choices from one prompt (``n``) on OpenAI's routes: SmolLM2 served with four slots, the openai client,
and llama-server on the same requests for the shape of the answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

SETTINGS = ("--ctx-size", "4096", "--parallel", "4")
QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name three colours."}]
# Past the 256 tokens a slot must share to borrow another's cache, and asked nowhere else in this module.
LONG = "Here is a list of numbers to remember: " + ", ".join(str(i) for i in range(150)) + ". Which came first?"


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """llama-server's answers (four slots, as ours) to a greedy chat with n=3, whole and streamed."""
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "4096", "-np", "4") as url:
        body = {"messages": QUESTION, "n": 3, "temperature": 0, "max_tokens": 12}
        whole = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
        streamed = _events(url, "/v1/chat/completions", {**body, "stream": True})
        return {"whole": whole, "streamed": streamed}


@pytest.fixture(scope="module")
def server(
    theirs: dict[str, Any], smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("serve-n"), *SETTINGS) as running:
        yield running


@pytest.fixture(scope="module")
def oai(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _events(url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events of a streamed answer, ``[DONE]`` left out."""
    events = []
    with httpx.stream("POST", f"{url}{path}", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line.removeprefix("data: ")))
    return events


def test_greedy_chat_gives_n_identical_choices_indexed_in_order(oai: openai.OpenAI, smollm2: Manifest) -> None:
    reply = oai.chat.completions.create(model=smollm2.name, messages=QUESTION, n=3, temperature=0, max_tokens=12)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert len({c.message.content for c in reply.choices}) == 1
    assert all(c.finish_reason in ("stop", "length") for c in reply.choices)


def test_usage_counts_the_prompt_once_and_every_choices_tokens(oai: openai.OpenAI, smollm2: Manifest) -> None:
    one = oai.chat.completions.create(model=smollm2.name, messages=QUESTION, temperature=0, max_tokens=12)
    three = oai.chat.completions.create(model=smollm2.name, messages=QUESTION, n=3, temperature=0, max_tokens=12)
    assert one.usage is not None and three.usage is not None
    assert three.usage.prompt_tokens == one.usage.prompt_tokens
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    assert three.usage.total_tokens == three.usage.prompt_tokens + three.usage.completion_tokens


def test_the_prompt_is_computed_once_for_all_choices(server: Server, smollm2: Manifest) -> None:
    body = {"model": smollm2.name, "messages": [{"role": "user", "content": LONG}], "n": 3, "max_tokens": 4}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json={**body, "temperature": 0}, timeout=120).json()
    prompt = reply["usage"]["prompt_tokens"]
    assert prompt > 256
    cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"]  # the first choice's, from its own slot
    # the first choice computes the prompt; the others borrow its cache and compute only its last token
    assert reply["timings"]["prompt_n"] == prompt - cached + 2


def test_seeded_sampled_choices_differ_and_repeat_with_the_seed(oai: openai.OpenAI, smollm2: Manifest) -> None:
    def ask() -> list[str | None]:
        reply = oai.chat.completions.create(
            model=smollm2.name,
            messages=[{"role": "user", "content": "Write a sentence about the sea."}],
            n=3,
            temperature=1.0,
            seed=42,
            max_tokens=16,
        )
        return [c.message.content for c in reply.choices]

    first = ask()
    assert len(set(first)) == 3
    assert ask() == first


def test_streamed_choices_interleave_and_each_finishes(oai: openai.OpenAI, smollm2: Manifest) -> None:
    whole = oai.chat.completions.create(model=smollm2.name, messages=QUESTION, n=3, temperature=0, max_tokens=12)
    chunks = list(
        oai.chat.completions.create(
            model=smollm2.name,
            messages=QUESTION,
            n=3,
            temperature=0,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = {0: "", 1: "", 2: ""}
    finishes: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for chunk in chunks[:-1]:
        (choice,) = chunk.choices
        texts[choice.index] += choice.delta.content or ""
        if choice.finish_reason is not None:
            finishes[choice.index].append(choice.finish_reason)
    assert [texts[i] for i in range(3)] == [c.message.content for c in whole.choices]
    assert [finishes[i] for i in range(3)] == [[c.finish_reason] for c in whole.choices]
    indexes = [c.choices[0].index for c in chunks[:-1]]
    assert indexes != sorted(indexes)  # side by side, not one choice after the other
    usage, whole_usage = chunks[-1].usage, whole.usage
    assert chunks[-1].choices == [] and usage is not None and whole_usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (whole_usage.prompt_tokens, whole_usage.completion_tokens)


def test_text_completions_give_n_choices_per_prompt(oai: openai.OpenAI, smollm2: Manifest) -> None:
    prompts = ["One, two, three,", "Monday, Tuesday,"]
    reply = oai.completions.create(model=smollm2.name, prompt=prompts, n=3, temperature=0, max_tokens=4)
    assert [c.index for c in reply.choices] == list(range(6))
    singles = [oai.completions.create(model=smollm2.name, prompt=p, temperature=0, max_tokens=4) for p in prompts]
    assert [c.text for c in reply.choices] == [s.choices[0].text for s in singles for _ in range(3)]
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles if s.usage is not None)


def test_n_choices_each_follow_the_response_format(oai: openai.OpenAI, smollm2: Manifest) -> None:
    reply = oai.chat.completions.create(
        model=smollm2.name,
        messages=[{"role": "user", "content": "Give a JSON object with a name."}],
        n=2,
        temperature=1.0,
        seed=7,
        max_tokens=64,
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "p",
                "schema": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "maxLength": 12}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
            },
        },
    )
    assert len(reply.choices) == 2
    for choice in reply.choices:
        assert isinstance(json.loads(choice.message.content or "")["name"], str)


def test_n_choices_each_call_the_required_tool(oai: openai.OpenAI, smollm2: Manifest) -> None:
    tool: ChatCompletionToolParam = {
        "type": "function",
        "function": {
            "name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    reply = oai.chat.completions.create(
        model=smollm2.name,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        n=2,
        temperature=0,
        max_tokens=64,
        tools=[tool],
        tool_choice="required",
    )
    assert [c.index for c in reply.choices] == [0, 1]
    for choice in reply.choices:
        (call,) = choice.message.tool_calls or []
        assert call.type == "function" and call.function.name == "weather"


def test_more_than_128_choices_is_a_400_naming_n(oai: openai.OpenAI, smollm2: Manifest) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        oai.chat.completions.create(model=smollm2.name, messages=QUESTION, n=129, max_tokens=1)
    assert raised.value.param == "n"


def test_more_prompts_times_n_than_128_choices_is_a_400_naming_the_prompt(
    oai: openai.OpenAI, smollm2: Manifest
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        oai.completions.create(model=smollm2.name, prompt=["a", "b", "c"], n=43, max_tokens=1)  # 129 choices
    assert raised.value.param == "prompt"


def test_the_answer_has_llama_servers_shape(server: Server, smollm2: Manifest, theirs: dict[str, Any]) -> None:
    body = {"model": smollm2.name, "messages": QUESTION, "n": 3, "temperature": 0, "max_tokens": 12}
    ours = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
    their = theirs["whole"]
    assert [c["index"] for c in ours["choices"]] == [c["index"] for c in their["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in ours["choices"]] == [c["message"]["content"] for c in their["choices"]]
    assert [c["finish_reason"] for c in ours["choices"]] == [c["finish_reason"] for c in their["choices"]]
    assert ours["usage"]["prompt_tokens"] == their["usage"]["prompt_tokens"]


def test_the_stream_has_llama_servers_shape(server: Server, smollm2: Manifest, theirs: dict[str, Any]) -> None:
    body = {"model": smollm2.name, "messages": QUESTION, "n": 3, "temperature": 0, "max_tokens": 12, "stream": True}
    ours = _events(server.url, "/v1/chat/completions", body)

    def shape(events: list[dict[str, Any]]) -> dict[int, tuple[str, list[str]]]:
        choices: dict[int, tuple[str, list[str]]] = {}
        for event in events:
            for c in event["choices"]:
                text, reasons = choices.get(c["index"], ("", []))
                reasons = reasons + ([c["finish_reason"]] if c["finish_reason"] else [])
                choices[c["index"]] = (text + (c["delta"].get("content") or ""), reasons)
        return choices

    assert shape(ours) == shape(theirs["streamed"])
