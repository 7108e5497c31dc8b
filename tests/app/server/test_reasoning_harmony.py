"""gpt-oss's harmony format in every dialect, as llama-server and Ollama serve gpt-oss: the analysis channel is the
thinking (``reasoning_content``, ``message.thinking``, a thinking block), the final channel the answer, and no
marker reaches a client. The model is SmolLM2 made a harmony model (tests/harmony_model.py): its template opens the
analysis channel and it never ends it itself, so with the server's ``--reasoning-budget`` of BUDGET its thinking is
exactly the first BUDGET tokens it writes, then ``<|end|><|start|>assistant<|channel|>final<|message|>`` is written
in its place and the answer goes on; raw ``/completion`` requests on the same server say what those are. gpt-oss
always thinks: ``think: false``, ``reasoning_effort: "none"`` and Anthropic's ``disabled`` change nothing there, as
in Ollama and llama-server; its effort goes to the template (``Reasoning: low``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.app.server.thinking import QUESTION, prompt_of, raw, raw_tokens, tokens_of
from tests.harmony_model import FORCED, OPENING

pytestmark = pytest.mark.model

BUDGET, LIMIT = 20, 32
GREEDY = {"temperature": 0, "repeat_penalty": 1.0}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def server(smollm2_harmony: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("serve-harmony")
    with serving(smollm2_harmony.name, test_home, log_dir, "--parallel", "1", "--reasoning-budget", str(BUDGET)) as s:
        yield s


def budgeted(server: Server, prompt: str, budget: int = BUDGET, limit: int = LIMIT) -> tuple[str, str]:
    """The thinking and the answer of a greedy chat rendered to ``prompt`` with a thinking budget of ``budget``
    tokens and ``limit`` tokens in all: the first ``budget`` tokens the model writes, then what it writes after the
    forced end of its analysis and start of its final message (which count in ``limit``)."""
    thinking, thought = raw_tokens(server, prompt, budget)
    forced = tokens_of(server, FORCED)
    closed = tokens_of(server, prompt) + thought + forced
    return thinking, raw(server, closed, limit - budget - len(forced))


@pytest.fixture(scope="module")
def expected(server: Server) -> tuple[str, str]:
    return budgeted(server, prompt_of(server))


def chat(server: Server, **fields: Any) -> dict[str, Any]:
    body = {"messages": QUESTION, "max_tokens": LIMIT, **GREEDY, **fields}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def ollama_chat(server: Server, **fields: Any) -> dict[str, Any]:
    body = {"messages": QUESTION, "stream": False, "options": {**GREEDY, "num_predict": LIMIT}, **fields}
    reply = httpx.post(f"{server.url}/api/chat", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def test_the_model_is_known_to_think_from_its_file(server: Server, smollm2_harmony: Manifest) -> None:
    shown = httpx.post(f"{server.url}/api/show", json={"model": smollm2_harmony.name}, timeout=60).json()
    assert shown["capabilities"][-1] == "thinking"
    assert prompt_of(server).endswith(OPENING)


def test_the_analysis_channel_is_reasoning_content_and_the_final_channel_the_content(
    server: Server, smollm2_harmony: Manifest, expected: tuple[str, str]
) -> None:
    reply = chat(server, model=smollm2_harmony.name)
    message = reply["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == expected
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == BUDGET


def test_the_stream_sends_thinking_and_answer_apart_and_no_piece_of_a_marker(
    server: Server, smollm2_harmony: Manifest, expected: tuple[str, str]
) -> None:
    oai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    stream = oai.chat.completions.create(
        model=smollm2_harmony.name,
        messages=QUESTION,  # type: ignore[arg-type]
        max_tokens=LIMIT,
        temperature=0,
        stream=True,
    )
    deltas = [chunk.choices[0].delta for chunk in cast("openai.Stream[ChatCompletionChunk]", stream) if chunk.choices]
    thoughts = [getattr(d, "reasoning_content", None) or "" for d in deltas]
    answers = [d.content or "" for d in deltas]
    assert ("".join(thoughts), "".join(answers)) == expected
    assert not any("<|" in piece or "|>" in piece for piece in thoughts + answers)


def test_a_reply_cut_while_thinking_has_no_answer(server: Server, smollm2_harmony: Manifest) -> None:
    choice = chat(server, model=smollm2_harmony.name, max_tokens=3)["choices"][0]
    assert choice["finish_reason"] == "length"
    message = choice["message"]
    assert (message["reasoning_content"], message["content"]) == (raw(server, prompt_of(server), 3), "")


def test_a_budget_of_none_answers_at_once(server: Server, smollm2_harmony: Manifest) -> None:
    message = chat(server, model=smollm2_harmony.name, reasoning_budget_tokens=0)["choices"][0]["message"]
    assert (message.get("reasoning_content") or "", message["content"]) == budgeted(server, prompt_of(server), 0)


def test_the_reasoning_effort_goes_to_the_template(server: Server, smollm2_harmony: Manifest) -> None:
    low = prompt_of(server, reasoning_effort="low")
    assert "Reasoning: low" in low and "Reasoning: medium" in prompt_of(server)
    message = chat(server, model=smollm2_harmony.name, reasoning_effort="low")["choices"][0]["message"]
    expected = budgeted(server, low)
    assert (message["reasoning_content"], message["content"]) == expected != budgeted(server, prompt_of(server))


def test_thinking_left_in_the_content_keeps_the_analysis_message_as_written(
    server: Server, smollm2_harmony: Manifest, expected: tuple[str, str]
) -> None:
    message = chat(server, model=smollm2_harmony.name, reasoning_format="none")["choices"][0]["message"]
    thinking, answer = expected
    assert message["content"] == f"<|channel|>analysis<|message|>{thinking}<|end|>{answer}"
    assert not message.get("reasoning_content")


def test_reasoning_effort_none_cannot_turn_gpt_oss_thinking_off(
    server: Server, smollm2_harmony: Manifest, expected: tuple[str, str]
) -> None:
    message = chat(server, model=smollm2_harmony.name, reasoning_effort="none")["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == expected


def test_json_comes_as_the_final_message_after_the_thinking(server: Server, smollm2_harmony: Manifest) -> None:
    message = chat(server, model=smollm2_harmony.name, response_format={"type": "json_object"}, max_tokens=100)[
        "choices"
    ][0]["message"]
    assert message["reasoning_content"] == raw(server, prompt_of(server), BUDGET)
    assert isinstance(json.loads(message["content"]), dict)


def test_a_required_call_comes_after_the_thinking(server: Server, smollm2_harmony: Manifest) -> None:
    reply = chat(server, model=smollm2_harmony.name, tools=[WEATHER], tool_choice="required", max_tokens=100)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
    assert choice["message"]["reasoning_content"] and not choice["message"]["content"]


def test_an_earlier_calls_thinking_goes_back_as_its_analysis_message_and_an_answers_is_dropped(
    server: Server,
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "reasoning_content": "Greet back."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Use the tool.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    prompt = prompt_of(server, turns, tools=[WEATHER])
    assert "<|start|>assistant<|channel|>final<|message|>Hello.<|end|>" in prompt and "Greet back." not in prompt
    assert (
        "<|start|>assistant<|channel|>analysis<|message|>Use the tool.<|end|>"
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
    ) in prompt


def test_ollama_think_levels_go_to_the_template_and_the_thinking_comes_apart(
    server: Server, smollm2_harmony: Manifest
) -> None:
    message = ollama_chat(server, model=smollm2_harmony.name, think="low")["message"]
    thinking, answer = budgeted(server, prompt_of(server, reasoning_effort="low"))
    assert (message["thinking"], message["content"]) == (thinking.lstrip(), answer.lstrip())


def test_ollama_think_max_is_high_for_gpt_oss(server: Server, smollm2_harmony: Manifest) -> None:
    highest = ollama_chat(server, model=smollm2_harmony.name, think="max")["message"]
    assert highest == ollama_chat(server, model=smollm2_harmony.name, think="high")["message"]


def test_ollama_think_false_changes_nothing_for_gpt_oss(server: Server, smollm2_harmony: Manifest) -> None:
    off = ollama_chat(server, model=smollm2_harmony.name, think=False)["message"]
    assert off == ollama_chat(server, model=smollm2_harmony.name)["message"]
    assert off["thinking"]


def test_anthropic_thinking_is_a_thinking_block_and_disabled_cannot_turn_it_off(
    server: Server, smollm2_harmony: Manifest, expected: tuple[str, str]
) -> None:
    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)

    def blocks(thinking: Any) -> list[tuple[str, str]]:
        message = claude.messages.create(
            model=smollm2_harmony.name,
            max_tokens=LIMIT,
            messages=QUESTION,  # type: ignore[arg-type]
            thinking=thinking,
            extra_body=GREEDY,
        )
        return [(b.type, b.thinking if b.type == "thinking" else getattr(b, "text", "")) for b in message.content]

    enabled = blocks({"type": "enabled", "budget_tokens": BUDGET})
    assert enabled == blocks({"type": "disabled"})
    assert enabled[0] == ("thinking", expected[0])
