"""A reasoning model's thinking on OpenAI's chat route, as llama-server answers it: ``reasoning_content`` apart from
``content``, streamed as ``delta.reasoning_content``; switched off through the template (``chat_template_kwargs``,
``reasoning_effort: "none"``); budgeted (``reasoning_budget_tokens``, ``--reasoning-budget``); left in the answer
with ``reasoning_format: "none"``. The model is SmolLM2 made a reasoning model (tests/reasoning_model.py): its
template opens the thinking and it never closes it itself, so what a budget does is exact: the thinking is the
first N tokens the model writes, then ``</think>`` written in its place, then the answer goes on from there. Raw
``/completion`` requests on the same server say what those tokens are."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.app.server.thinking import QUESTION, budgeted, prompt_of, raw
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server(smollm2_think: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_think.name, test_home, tmp_path_factory.mktemp("serve-think"), "--parallel", "1") as running:
        yield running


@pytest.fixture(scope="module")
def oai(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def chat(server: Server, **fields: Any) -> dict[str, Any]:
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 24, **fields}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def test_the_model_is_known_to_reason_from_its_file(server: Server) -> None:
    assert prompt_of(server).endswith("<think>\n")


def test_a_reply_cut_while_thinking_has_all_of_it_as_reasoning_and_no_answer(server: Server) -> None:
    reply = chat(server, max_tokens=8)
    choice = choice_of(reply)
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == ""
    assert choice["message"]["reasoning_content"] == raw(server, prompt_of(server), 8).rstrip()
    assert reply["usage"]["completion_tokens"] == 8


def test_a_budget_ends_the_thinking_after_that_many_tokens_and_the_answer_follows(server: Server) -> None:
    budget, limit = 5, 24
    message = choice_of(chat(server, reasoning_budget_tokens=budget, max_tokens=limit))["message"]
    assert (message["reasoning_content"], message["content"]) == budgeted(server, budget, limit)


def test_the_stream_sends_thinking_and_answer_apart_and_adds_up_to_the_whole_reply(server: Server) -> None:
    whole = choice_of(chat(server, reasoning_budget_tokens=4))["message"]
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 24, "reasoning_budget_tokens": 4, "stream": True}
    deltas = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                deltas += [c["delta"] for c in json.loads(line[len("data: ") :])["choices"]]
    assert not any("content" in d and "reasoning_content" in d for d in deltas)
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == whole["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == whole["content"]
    first_thought = next(i for i, d in enumerate(deltas) if d.get("reasoning_content"))
    first_answer = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert first_thought < first_answer


def test_the_openai_client_reads_the_reasoning(oai: openai.OpenAI, smollm2_think: Manifest) -> None:
    reply = oai.chat.completions.create(
        model=smollm2_think.name,
        messages=QUESTION,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=16,
        extra_body={"reasoning_budget_tokens": 3},
    )
    assert getattr(reply.choices[0].message, "reasoning_content", None)


@pytest.mark.parametrize("switch", [{"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}])
def test_thinking_switched_off_goes_through_the_template_and_no_reasoning_comes(
    server: Server, switch: dict[str, Any]
) -> None:
    assert prompt_of(server, **switch).endswith("<think>\n\n</think>\n\n")
    message = choice_of(chat(server, **switch))["message"]
    assert "reasoning_content" not in message
    assert message["content"] == raw(server, prompt_of(server, **switch), 24)


def test_reasoning_format_none_leaves_the_thinking_in_the_answer_as_the_model_wrote_it(server: Server) -> None:
    # the end token not taken: an answer follows the thinking on any CPU (one could end it at once)
    limits = {"reasoning_budget_tokens": 3, "max_tokens": 10, "ignore_eos": True}
    message = choice_of(chat(server, reasoning_format="none", **limits))["message"]
    thinking = raw(server, prompt_of(server), 3)
    assert "reasoning_content" not in message
    assert message["content"].startswith("<think>\n" + thinking + "</think>")
    assert len(message["content"]) > len("<think>\n" + thinking + "</think>")  # and the answer after it


def test_an_unknown_reasoning_format_is_a_400_naming_it(server: Server) -> None:
    body = {"messages": QUESTION, "reasoning_format": "deepseek-legacy-ish"}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "reasoning_format"


def test_a_model_that_does_not_reason_answers_as_before(smollm2_server: Server, smollm2: Manifest) -> None:
    body = {
        "model": smollm2.name,
        "messages": QUESTION,
        "temperature": 0,
        "max_tokens": 8,
        "reasoning_budget_tokens": 2,
        "ignore_eos": True,  # an answer there on any CPU
    }
    message = httpx.post(f"{smollm2_server.url}/v1/chat/completions", json=body, timeout=120).json()
    assert "reasoning_content" not in choice_of(message)["message"]
    assert choice_of(message)["message"]["content"]


def test_the_server_budget_applies_where_the_request_sets_none(
    smollm2_think: Manifest, test_home: Path, tmp_path: Path, server: Server
) -> None:
    thinking = raw(server, prompt_of(server), 2)
    with serving(smollm2_think.name, test_home, tmp_path, "--parallel", "1", "--reasoning-budget", "2") as budgeted:
        assert choice_of(chat(budgeted))["message"]["reasoning_content"] == thinking.rstrip()


def test_the_template_switch_renders_the_prompt_llama_server_renders(
    smollm2_think: Manifest, server: Server, tmp_path: Path
) -> None:
    switch: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
    with llama_server(smollm2_think.path, tmp_path, "--jinja") as url:
        theirs = httpx.post(f"{url}/apply-template", json={"messages": QUESTION, **switch}, timeout=60).json()
    assert prompt_of(server, **switch) == theirs["prompt"]


def choice_of(reply: dict[str, Any]) -> dict[str, Any]:
    choice: dict[str, Any] = reply["choices"][0]
    return choice
