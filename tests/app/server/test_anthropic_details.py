"""Anthropic's Messages API where llama-server is more lenient than Anthropic, through a real server with the real
SmolLM2 and the official anthropic client: ``thinking`` is accepted and, for a model that does not reason,
ignored; whitespace stop sequences such as ``"\\n"`` end the answer; an empty ``messages`` list is answered as
the real llama-server answers it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam, ThinkingConfigParam

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

GREEDY = {"temperature": 0}  # not a keyword of the client's create(): sent as it is, in extra_body
POEM: list[MessageParam] = [{"role": "user", "content": "Write a short poem about the sea, one line per verse."}]
ASK: list[MessageParam] = [{"role": "user", "content": "What is the capital of France?"}]
THINKING: list[ThinkingConfigParam] = [
    {"type": "enabled", "budget_tokens": 1024},
    {"type": "enabled", "budget_tokens": 16},  # under Anthropic's minimum: llama-server does not check it either
    {"type": "disabled"},
]


@pytest.fixture(scope="module")
def claude(smollm2_server: Server) -> Iterator[anthropic.Anthropic]:
    c = anthropic.Anthropic(base_url=smollm2_server.url, api_key="unused", max_retries=0, timeout=120)
    yield c
    c.close()


@pytest.fixture(scope="module")
def llama(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real llama-server on the same model, for what it answers."""
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-server"), "-c", "2048", "-np", "1") as url:
        yield url


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def greedy(claude: anthropic.Anthropic, model: str, messages: list[MessageParam], **extra: Any) -> Any:
    return claude.messages.create(model=model, messages=messages, max_tokens=40, extra_body=GREEDY, **extra)


# -- thinking -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("thinking", THINKING, ids=lambda t: f"{t['type']}-{t.get('budget_tokens', '')}")
def test_thinking_is_accepted_and_ignored_by_a_model_that_does_not_reason(
    claude: anthropic.Anthropic, model_name: str, thinking: ThinkingConfigParam
) -> None:
    plain = greedy(claude, model_name, ASK)
    thought = greedy(claude, model_name, ASK, thinking=thinking)
    assert [block.type for block in thought.content] == ["text"]
    assert text_of(thought) == text_of(plain) and text_of(plain).strip()
    assert (thought.stop_reason, thought.usage.output_tokens) == (plain.stop_reason, plain.usage.output_tokens)


def test_a_streamed_answer_with_thinking_has_only_its_text_block(claude: anthropic.Anthropic, model_name: str) -> None:
    plain = greedy(claude, model_name, ASK)
    with claude.messages.stream(
        model=model_name, messages=ASK, max_tokens=40, thinking=THINKING[0], extra_body=GREEDY
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["text"]
    assert streamed == text_of(plain)


def test_count_tokens_accepts_thinking_and_counts_the_same_prompt(claude: anthropic.Anthropic, model_name: str) -> None:
    plain = claude.messages.count_tokens(model=model_name, messages=ASK)
    thought = claude.messages.count_tokens(model=model_name, messages=ASK, thinking=THINKING[0])
    assert thought.input_tokens == plain.input_tokens > 0


# -- whitespace stop sequences --------------------------------------------------------------------------------------


# The poem's shape, forced (a model's greedy text differs between CPUs: a blank line in it is not to be hoped for):
# a word, a space, a verse, a blank line, another verse; the words are the model's.
VERSES = {**GREEDY, "grammar": 'root ::= [A-Za-z]{1,12} " " [^\\n]{1,40} "\\n\\n" [^\\n]{1,40}'}


@pytest.mark.parametrize("stop", ["\n", " ", "\n\n"], ids=["newline", "space", "blank-line"])
def test_a_whitespace_stop_sequence_ends_the_answer_there_and_is_named(
    claude: anthropic.Anthropic, model_name: str, stop: str
) -> None:
    free = text_of(claude.messages.create(model=model_name, messages=POEM, max_tokens=80, extra_body=VERSES))
    assert re.fullmatch(r"[A-Za-z]{1,12} [^\n]{1,40}\n\n[^\n]{1,40}", free), free  # the grammar's shape
    assert stop in free.lstrip(), free  # the poem has it past its start: the stop cuts a text that is not empty
    stopped = claude.messages.create(
        model=model_name, messages=POEM, max_tokens=80, stop_sequences=[stop], extra_body=VERSES
    )
    assert stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == stop
    assert text_of(stopped) == free[: free.index(stop)]


def test_a_newline_stop_sequence_is_named_in_the_streams_message_delta(smollm2_server: Server, model_name: str) -> None:
    body = {"model": model_name, "messages": POEM, "max_tokens": 80, "stop_sequences": ["\n"], "stream": True}
    with httpx.stream("POST", f"{smollm2_server.url}/v1/messages", json={**body, **VERSES}, timeout=120) as response:
        assert response.status_code == 200
        data = [json.loads(line.removeprefix("data: ")) for line in response.iter_lines() if line.startswith("data:")]
    text = "".join(d["delta"]["text"] for d in data if d["type"] == "content_block_delta")
    delta = next(d for d in data if d["type"] == "message_delta")
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "\n"}
    assert "\n" not in text and text.strip()


def test_a_grammar_and_a_json_schema_together_are_refused_naming_the_grammar(
    smollm2_server: Server, model_name: str
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = {"model": model_name, "messages": POEM, "max_tokens": 8, **VERSES}
    body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    answer = httpx.post(f"{smollm2_server.url}/v1/messages", json=body, timeout=120)
    assert answer.status_code == 400, answer.text
    assert answer.json()["type"] == "error" and "grammar" in answer.json()["error"]["message"]


# -- empty messages -------------------------------------------------------------------------------------------------


def test_empty_messages_are_answered_as_llama_server_answers_them(
    llama: str, smollm2_server: Server, model_name: str
) -> None:
    body = {"model": model_name, "max_tokens": 8, "messages": [], **GREEDY}
    theirs = httpx.post(f"{llama}/v1/messages", json=body, timeout=120)
    ours = httpx.post(f"{smollm2_server.url}/v1/messages", json=body, timeout=120)
    assert ours.status_code == theirs.status_code == 200, (theirs.text, ours.text)
    mine, reference = ours.json(), theirs.json()
    assert set(mine) == set(reference)
    assert (mine["type"], mine["role"]) == (reference["type"], reference["role"]) == ("message", "assistant")
    assert [block["type"] for block in mine["content"]] == [block["type"] for block in reference["content"]]
    assert mine["stop_reason"] == reference["stop_reason"]
    assert mine["usage"]["output_tokens"] == reference["usage"]["output_tokens"]

    def prompt(usage: dict[str, int]) -> int:
        return usage["input_tokens"] + usage["cache_read_input_tokens"]

    assert prompt(mine["usage"]) == prompt(reference["usage"])  # the same prompt: the template with no turn


def test_empty_messages_with_a_system_text_answer_it(claude: anthropic.Anthropic, model_name: str) -> None:
    message = claude.messages.create(
        model=model_name, system="Say hello.", messages=[], max_tokens=8, extra_body=GREEDY
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.output_tokens > 0
    counted = claude.messages.count_tokens(model=model_name, system="Say hello.", messages=[])
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == counted.input_tokens


def test_a_last_assistant_turn_is_a_prefill_continued_as_llama_server_continues_it(
    llama: str, smollm2_server: Server, model_name: str
) -> None:
    turns = [*ASK, {"role": "assistant", "content": "The capital of France is"}]
    body = {"model": model_name, "max_tokens": 4, "messages": turns, **GREEDY}
    theirs = httpx.post(f"{llama}/v1/messages", json=body, timeout=120)
    ours = httpx.post(f"{smollm2_server.url}/v1/messages", json=body, timeout=120)
    assert ours.status_code == theirs.status_code == 200, (theirs.text, ours.text)

    def prompt(usage: dict[str, int]) -> int:
        return usage["input_tokens"] + usage["cache_read_input_tokens"]

    assert prompt(ours.json()["usage"]) == prompt(theirs.json()["usage"])  # the turn left open, as there
