"""A reasoning model's thinking on Ollama's /api/chat and /api/generate, as Ollama answers it: ``message.thinking``
(``thinking``) apart from ``content`` (``response``), without the whitespace that starts either, streamed in NDJSON
lines as it is written; ``think`` switches it (``false`` through the template; a level is ``true`` for a template
that reads no effort); asked of a model that does not reason, Ollama's 400. Ollama's requests carry no budget, so
the server is started with ``--reasoning-budget``: the test model (tests/reasoning_model.py) never closes its
thinking itself, so its thinking is exactly the first BUDGET tokens it writes, then ``</think>`` is written in its
place and the answer goes on; raw ``/completion`` requests on the same server say what those are
(tests/app/server/thinking.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from localinfer.app.server.ollama.wire import ChatBody
from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.app.server.thinking import QUESTION, budgeted, prompt_of, raw

pytestmark = pytest.mark.model

BUDGET, LIMIT = 5, 16
GREEDY = {"temperature": 0, "repeat_penalty": 1.0}  # as the raw /completion requests of thinking.py sample
PROMPT = QUESTION[0]["content"]


@pytest.fixture(scope="module")
def server(smollm2_think: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("serve-think-ollama")
    with serving(smollm2_think.name, test_home, log_dir, "--parallel", "1", "--reasoning-budget", str(BUDGET)) as s:
        yield s


@pytest.fixture(scope="module")
def expected(server: Server) -> tuple[str, str]:
    """The thinking and the answer of a greedy chat of QUESTION in LIMIT tokens, as Ollama trims them."""
    thinking, answer = budgeted(server, BUDGET, LIMIT)
    return thinking.lstrip(), answer.lstrip()


def post(server: Server, path: str, **fields: Any) -> dict[str, Any]:
    reply = httpx.post(f"{server.url}{path}", json=fields, timeout=120)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def chat(server: Server, limit: int = LIMIT, **fields: Any) -> dict[str, Any]:
    options = {**GREEDY, "num_predict": limit}
    return post(server, "/api/chat", **{"messages": QUESTION, "stream": False, "options": options, **fields})


def generate(server: Server, limit: int = LIMIT, **fields: Any) -> dict[str, Any]:
    options = {**GREEDY, "num_predict": limit}
    return post(server, "/api/generate", **{"prompt": PROMPT, "stream": False, "options": options, **fields})


def lines(server: Server, path: str, **fields: Any) -> list[dict[str, Any]]:
    body = {"stream": True, "options": {**GREEDY, "num_predict": LIMIT}, **fields}
    with httpx.stream("POST", f"{server.url}{path}", json=body, timeout=120) as response:
        assert response.status_code == 200
        return [json.loads(line) for line in response.iter_lines() if line]


def test_chat_answers_the_thinking_in_message_thinking_apart_from_the_content(
    server: Server, expected: tuple[str, str]
) -> None:
    message = chat(server, think=True)["message"]
    assert (message["thinking"], message["content"]) == expected


def test_generate_answers_the_thinking_in_thinking_apart_from_the_response(
    server: Server, expected: tuple[str, str]
) -> None:
    reply = generate(server, think=True)
    assert (reply["thinking"], reply["response"]) == expected


def test_a_model_that_reasons_thinks_apart_when_the_request_says_nothing(
    server: Server, expected: tuple[str, str]
) -> None:
    message = chat(server)["message"]
    assert (message["thinking"], message["content"]) == expected


def test_a_level_thinks_as_true_for_a_template_that_reads_no_effort(server: Server, expected: tuple[str, str]) -> None:
    message = chat(server, think="high")["message"]
    assert (message["thinking"], message["content"]) == expected


def test_chat_streams_thinking_lines_then_content_lines_that_add_up_to_the_whole(
    server: Server, expected: tuple[str, str]
) -> None:
    streamed = lines(server, "/api/chat", messages=QUESTION, think=True)
    pieces = [line["message"] for line in streamed[:-1]]
    thought = [i for i, m in enumerate(pieces) if m.get("thinking")]
    answered = [i for i, m in enumerate(pieces) if m["content"]]
    assert len(thought) > 1 and answered  # as it is written, not whole
    assert max(thought) < min(answered)
    assert ("".join(m.get("thinking", "") for m in pieces), "".join(m["content"] for m in pieces)) == expected
    assert streamed[-1]["done"] is True
    assert streamed[-1]["message"] == {"role": "assistant", "content": ""}


def test_generate_streams_thinking_lines_then_response_lines_that_add_up_to_the_whole(
    server: Server, expected: tuple[str, str]
) -> None:
    streamed = lines(server, "/api/generate", prompt=PROMPT, think=True)
    pieces = streamed[:-1]
    assert len([p for p in pieces if p.get("thinking")]) > 1
    assert ("".join(p.get("thinking", "") for p in pieces), "".join(p["response"] for p in pieces)) == expected
    assert streamed[-1]["done"] is True


def test_think_false_turns_thinking_off_through_the_template_and_answers_at_once(server: Server) -> None:
    off = prompt_of(server, chat_template_kwargs={"enable_thinking": False})
    assert off.endswith("<think>\n\n</think>\n\n")
    message = chat(server, think=False)["message"]
    assert "thinking" not in message
    assert message["content"] == raw(server, off, LIMIT)


def test_think_false_on_generate_answers_the_prompt_with_the_empty_block(server: Server) -> None:
    off = prompt_of(server, chat_template_kwargs={"enable_thinking": False})
    reply = generate(server, think=False)
    assert "thinking" not in reply
    assert reply["response"] == raw(server, off, LIMIT)


def test_a_reply_cut_while_thinking_has_an_empty_answer_and_ends_for_length(server: Server) -> None:
    reply = chat(server, limit=3, think=True)
    assert reply["done_reason"] == "length"
    assert reply["message"]["content"] == ""
    assert reply["message"]["thinking"] == raw(server, prompt_of(server), 3).strip()
    assert reply["eval_count"] == 3


def test_a_raw_prompt_stays_raw_text(server: Server) -> None:
    prompt = prompt_of(server)
    reply = generate(server, prompt=prompt, raw=True, think=True)
    assert "thinking" not in reply
    assert reply["response"] == raw(server, prompt, LIMIT)


def test_an_earlier_turns_thinking_goes_back_to_the_template_which_drops_it(server: Server) -> None:
    turns = [*QUESTION, {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And of Spain?"}]
    given = [*QUESTION, {**turns[1], "thinking": "The capital of France is Paris."}, turns[2]]
    assert chat(server, limit=4, messages=given)["message"] == chat(server, limit=4, messages=turns)["message"]


def test_an_assistant_turns_thinking_is_the_messages_reasoning() -> None:
    body = ChatBody.model_validate({"messages": [{"role": "assistant", "content": "Paris.", "thinking": "Hmm."}]})
    assert body.to_core("any").messages[0].reasoning == "Hmm."


def test_an_unknown_think_value_is_ollamas_400(server: Server) -> None:
    reply = httpx.post(f"{server.url}/api/chat", json={"messages": QUESTION, "think": "huge"}, timeout=60)
    assert reply.status_code == 400
    assert reply.json() == {
        "error": 'invalid think value: "huge" (must be "high", "medium", "low", "max", true, or false)'
    }


@pytest.mark.parametrize("think", [True, "low"])
@pytest.mark.parametrize("path", ["/api/chat", "/api/generate"])
def test_thinking_asked_of_a_model_that_does_not_reason_is_ollamas_400(
    smollm2_server: Server, smollm2: Manifest, path: str, think: bool | str
) -> None:
    body = {"model": smollm2.name, "messages": QUESTION, "prompt": PROMPT, "think": think}
    reply = httpx.post(f"{smollm2_server.url}{path}", json=body, timeout=120)
    assert reply.status_code == 400
    assert reply.json() == {"error": f'"{smollm2.name}" does not support thinking'}


def test_think_false_on_a_model_that_does_not_reason_answers_as_before(
    smollm2_server: Server, smollm2: Manifest
) -> None:
    options = {**GREEDY, "num_predict": 4}
    body = {"model": smollm2.name, "messages": QUESTION, "stream": False, "options": options}
    before = httpx.post(f"{smollm2_server.url}/api/chat", json=body, timeout=120).json()
    after = httpx.post(f"{smollm2_server.url}/api/chat", json={**body, "think": False}, timeout=120).json()
    assert after["message"] == before["message"]
    assert "thinking" not in after["message"]


@pytest.fixture(scope="module")
def client(server: Server) -> ollama.Client:
    return ollama.Client(host=server.url, timeout=120)


def test_the_ollama_client_reads_message_thinking(
    client: ollama.Client, smollm2_think: Manifest, expected: tuple[str, str]
) -> None:
    reply = client.chat(smollm2_think.name, messages=QUESTION, think=True, options={**GREEDY, "num_predict": LIMIT})
    assert (reply.message.thinking, reply.message.content) == expected


def test_the_ollama_client_streams_message_thinking(
    client: ollama.Client, smollm2_think: Manifest, expected: tuple[str, str]
) -> None:
    options = {**GREEDY, "num_predict": LIMIT}
    parts = list(client.chat(smollm2_think.name, messages=QUESTION, think=True, stream=True, options=options))
    thinking = "".join(p.message.thinking or "" for p in parts)
    assert (thinking, "".join(p.message.content or "" for p in parts)) == expected


def test_the_ollama_client_reads_generates_thinking(
    client: ollama.Client, smollm2_think: Manifest, expected: tuple[str, str]
) -> None:
    reply = client.generate(smollm2_think.name, PROMPT, think=True, options={**GREEDY, "num_predict": LIMIT})
    assert (reply.thinking, reply.response) == expected
