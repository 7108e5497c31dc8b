"""A reasoning model's thinking on OpenAI's Responses API: a ``reasoning`` item (its thinking as one
``reasoning_text`` part) before the ``message`` item, streamed with its own events; ``reasoning.effort: "none"``
turns it off; ``usage.output_tokens_details.reasoning_tokens`` counts it; an earlier turn's ``reasoning`` item goes
back to the template as that turn's thinking. The model is SmolLM2 made a reasoning model (tests/reasoning_model.py),
which never closes its thinking itself: with a budget of N the thinking is the first N tokens it writes, then
``</think>`` is written in its place and the answer follows; raw requests on the same server say what those are
(tests/app/server/thinking.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import ResponseOutputMessage, ResponseReasoningItem

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.app.server.test_responses_api import events_of, fields, holds
from tests.app.server.thinking import QUESTION, budgeted, prompt_of, raw, tokens_of
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

BUDGET, LIMIT = 5, 24
# A template that writes each turn's thinking where a test can see it: role, reasoning_content, content.
SHOWING_THINKING = (
    "{% for m in messages %}{{ m.role }}:{{ m.reasoning_content or '' }}|{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@pytest.fixture(scope="module")
def server(smollm2_think: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2_think.name, test_home, tmp_path_factory.mktemp("serve-think"), "--parallel", "1") as running:
        yield running


@pytest.fixture(scope="module")
def oai(server: Server) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    yield client
    client.close()


@pytest.fixture(scope="module")
def expected(server: Server) -> tuple[str, str]:
    """The thinking and the answer of a greedy reply budgeted to BUDGET tokens, LIMIT in all."""
    return budgeted(server, BUDGET, LIMIT)


def ask(oai: openai.OpenAI, name: str, **fields: Any) -> Any:
    fields = {"temperature": 0, "max_output_tokens": LIMIT, **fields}
    return oai.responses.create(model=name, input=QUESTION, **fields)  # type: ignore[arg-type]


def budget(tokens: int = BUDGET) -> dict[str, Any]:
    return {"extra_body": {"reasoning_budget_tokens": tokens}}


def test_the_thinking_is_a_reasoning_item_before_the_message(
    oai: openai.OpenAI, smollm2_think: Manifest, expected: tuple[str, str]
) -> None:
    response = ask(oai, smollm2_think.name, **budget())
    reasoning, message = response.output
    assert isinstance(reasoning, ResponseReasoningItem) and isinstance(message, ResponseOutputMessage)
    assert reasoning.summary == [] and reasoning.status == "completed" and reasoning.id.startswith("rs_")
    assert [(part.type, part.text) for part in reasoning.content or ()] == [("reasoning_text", expected[0])]
    assert response.output_text == expected[1]


def test_usage_counts_the_thinking_but_not_its_forced_end_as_reasoning_tokens(
    oai: openai.OpenAI, smollm2_think: Manifest
) -> None:
    usage = ask(oai, smollm2_think.name, **budget()).usage
    chat = oai.chat.completions.create(
        model=smollm2_think.name,
        messages=QUESTION,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=LIMIT,
        extra_body={"reasoning_budget_tokens": BUDGET},
    )
    assert usage.output_tokens_details.reasoning_tokens == BUDGET  # the thinking; </think> is not thinking
    assert chat.usage is not None and usage.output_tokens == chat.usage.completion_tokens  # thinking and answer
    assert chat.usage.completion_tokens_details is not None
    assert chat.usage.completion_tokens_details.reasoning_tokens == BUDGET


def test_a_reply_cut_while_thinking_is_an_incomplete_reasoning_item_and_no_message(
    oai: openai.OpenAI, smollm2_think: Manifest, server: Server
) -> None:
    response = ask(oai, smollm2_think.name, max_output_tokens=8)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    (reasoning,) = response.output
    assert isinstance(reasoning, ResponseReasoningItem) and reasoning.status == "incomplete"
    assert reasoning.content is not None and reasoning.content[0].text == raw(server, prompt_of(server), 8).rstrip()
    assert response.usage.output_tokens_details.reasoning_tokens == response.usage.output_tokens == 8


def test_the_stream_sends_the_reasoning_item_events_then_the_message_events_in_order(
    oai: openai.OpenAI, smollm2_think: Manifest, expected: tuple[str, str]
) -> None:
    events = list(ask(oai, smollm2_think.name, stream=True, **budget()))
    kinds = [event.type for event in events]
    thoughts, deltas = kinds.count("response.reasoning_text.delta"), kinds.count("response.output_text.delta")
    item = ["response.output_item.added", "response.content_part.added"]
    done = ["response.content_part.done", "response.output_item.done"]
    assert kinds == [
        "response.created",
        "response.in_progress",
        *item,
        *["response.reasoning_text.delta"] * thoughts,
        "response.reasoning_text.done",
        *done,
        *item,
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        *done,
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    thinking = [e for e in events if e.type.startswith("response.reasoning_text")]
    assert "".join(e.delta for e in thinking if e.type == "response.reasoning_text.delta") == expected[0]
    assert thinking[-1].text == expected[0]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == expected[1]
    indexes = {e.output_index for e in events[2 : 2 + len(item) + thoughts + 1 + len(done)]}
    assert indexes == {0} and {e.output_index for e in events[-1 - len(done) - 1 - deltas - len(item) : -1]} == {1}
    added, part = events[2], events[3]
    assert added.type == "response.output_item.added" and added.item.type == "reasoning"
    assert part.type == "response.content_part.added" and (part.part.type, part.part.text) == ("reasoning_text", "")


def test_the_stream_helper_of_the_openai_client_ends_with_both_items(
    oai: openai.OpenAI, smollm2_think: Manifest, expected: tuple[str, str]
) -> None:
    with oai.responses.stream(
        model=smollm2_think.name,
        input=QUESTION,  # type: ignore[arg-type]
        temperature=0,
        max_output_tokens=LIMIT,
        extra_body={"reasoning_budget_tokens": BUDGET},
    ) as stream:
        final = stream.get_final_response()
    reasoning, message = final.output
    assert isinstance(reasoning, ResponseReasoningItem) and isinstance(message, ResponseOutputMessage)
    assert reasoning.content is not None and reasoning.content[0].text == expected[0]
    assert final.output_text == expected[1]


def test_reasoning_effort_none_turns_the_thinking_off_through_the_template(
    oai: openai.OpenAI, smollm2_think: Manifest, server: Server
) -> None:
    off = prompt_of(server, reasoning_effort="none")
    assert off.endswith("<think>\n\n</think>\n\n")
    counted = httpx.post(
        f"{server.url}/v1/responses/input_tokens", json={"input": QUESTION, "reasoning": {"effort": "none"}}, timeout=60
    )
    assert counted.json()["input_tokens"] == len(tokens_of(server, off))
    response = ask(oai, smollm2_think.name, reasoning={"effort": "none"})
    assert not [item for item in response.output if item.type == "reasoning"]
    assert response.output_text == raw(server, off, LIMIT)  # "": after an empty block SmolLM2 ends at once
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert response.reasoning is not None and response.reasoning.effort == "none"


def test_a_model_that_does_not_reason_answers_with_a_message_alone(smollm2_server: Server, smollm2: Manifest) -> None:
    body = {"model": smollm2.name, "input": QUESTION, "temperature": 0, "max_output_tokens": 8}
    answer = httpx.post(f"{smollm2_server.url}/v1/responses", json={**body, "reasoning_budget_tokens": 2}, timeout=120)
    assert [item["type"] for item in answer.json()["output"]] == ["message"]
    assert answer.json()["usage"]["output_tokens_details"]["reasoning_tokens"] == 0


# -- earlier turns --------------------------------------------------------------------------------------------------

EARLIER_TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "Hi"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "A greeting."}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
    {"role": "user", "content": "Bye"},
]


@pytest.fixture(scope="module")
def showing(smollm2_think: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The reasoning model with a template that writes every turn's thinking."""
    log_dir = tmp_path_factory.mktemp("serve-showing")
    with serving(smollm2_think.name, test_home, log_dir, "--parallel", "1", "--chat-template", SHOWING_THINKING) as s:
        yield s


def input_tokens(server: Server, items: list[dict[str, Any]]) -> int:
    answer = httpx.post(f"{server.url}/v1/responses/input_tokens", json={"input": items}, timeout=120)
    assert answer.status_code == 200, answer.text
    count: int = answer.json()["input_tokens"]
    return count


def test_an_earlier_reasoning_item_goes_back_as_that_turns_thinking(showing: Server) -> None:
    prompt = "user:|Hi\nassistant:A greeting.|Hello!\nuser:|Bye\nassistant:"
    assert input_tokens(showing, EARLIER_TURN) == len(tokens_of(showing, prompt))


def test_a_reasoning_item_with_no_text_gives_nothing_back(showing: Server) -> None:
    encrypted = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"}
    items = [EARLIER_TURN[0], encrypted, *EARLIER_TURN[2:]]
    assert input_tokens(showing, items) == len(tokens_of(showing, "user:|Hi\nassistant:|Hello!\nuser:|Bye\nassistant:"))


# -- as llama-server answers ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_answers(smollm2_think: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """llama-server's budgeted response and its stream on the same model; it runs only while it is asked."""
    body = {"input": QUESTION, "temperature": 0, "max_output_tokens": LIMIT, "reasoning_budget_tokens": BUDGET}
    with llama_server(smollm2_think.path, tmp_path_factory.mktemp("llama-server"), "--jinja", "-np", "1") as url:
        whole = httpx.post(f"{url}/v1/responses", json=body, timeout=120).json()
        with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}, timeout=120) as answer:
            events = events_of(answer.read().decode())
    return {"response": whole, "events": events}


def reasoning_events(events: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The last event of each name that is about the reasoning item."""
    return {
        name: data
        for name, data in events
        if data.get("item", {}).get("type") == "reasoning" or name.startswith("response.reasoning_text")
    }


def test_the_reasoning_item_has_every_field_llama_servers_has(
    llama_answers: dict[str, Any], server: Server, smollm2_think: Manifest
) -> None:
    body = {"input": QUESTION, "temperature": 0, "max_output_tokens": LIMIT, "reasoning_budget_tokens": BUDGET}
    ours = httpx.post(f"{server.url}/v1/responses", json=body, timeout=120).json()["output"]
    theirs = llama_answers["response"]["output"]
    assert [item["type"] for item in ours] == [item["type"] for item in theirs] == ["reasoning", "message"]
    assert holds(ours[0], theirs[0]), (fields(ours[0]), fields(theirs[0]))


def test_the_stream_sends_every_reasoning_event_llama_server_sends(
    llama_answers: dict[str, Any], server: Server
) -> None:
    body = {"input": QUESTION, "temperature": 0, "max_output_tokens": LIMIT, "reasoning_budget_tokens": BUDGET}
    with httpx.stream("POST", f"{server.url}/v1/responses", json={**body, "stream": True}, timeout=120) as answer:
        ours = reasoning_events(events_of(answer.read().decode()))
    theirs = reasoning_events(llama_answers["events"])
    assert set(theirs) == {"response.output_item.added", "response.reasoning_text.delta", "response.output_item.done"}
    for name, data in theirs.items():
        assert holds(ours[name], data), (name, fields(ours[name]), fields(data))
