"""``HttpClient`` with a reasoning model on a real ``localinfer serve``: the thinking comes back apart from the answer
(``delta.reasoning_content``), and the think switch and budget reach the server. The model is SmolLM2 made a
reasoning model (tests/reasoning_model.py); raw ``/completion`` requests on the same server say exactly what its
thinking and answer are (tests/app/server/thinking.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from localinfer.client.chat_body import chat_body
from localinfer.client.remote import HttpClient
from localinfer.models.store import Manifest
from localinfer.types import ChatMessage, ChatRequest, GenerationOptions, SamplingParams, Thinking, TokenChunk
from tests.app.server.conftest import Server, serving
from tests.app.server.thinking import QUESTION, budgeted, prompt_of, raw

pytestmark = pytest.mark.model

MODEL = "smollm2-think"


@pytest.fixture(scope="module")
def server(smollm2_think: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(MODEL, test_home, tmp_path_factory.mktemp("remote-think"), "--parallel", "1") as running:
        yield running


def ask(thinking: Thinking, max_tokens: int) -> ChatRequest:
    options = GenerationOptions(sampling=SamplingParams(temperature=0), max_tokens=max_tokens)
    return ChatRequest(MODEL, (ChatMessage("user", QUESTION[0]["content"]),), options, thinking=thinking)


def chunks_of(server: Server, request: ChatRequest) -> list[TokenChunk]:
    async def scenario() -> list[TokenChunk]:
        client = HttpClient(server.url)
        try:
            return [chunk async for chunk in client.chat(request)]
        finally:
            await client.close()

    return asyncio.run(scenario())


def test_chat_streams_the_thinking_apart_from_the_answer_within_the_budget(server: Server) -> None:
    chunks = chunks_of(server, ask(Thinking(budget=5), 24))
    thinking = "".join(c.reasoning for c in chunks)
    answer = "".join(c.text for c in chunks)
    assert (thinking, answer) == budgeted(server, 5, 24)
    first_thought = next(i for i, c in enumerate(chunks) if c.reasoning)
    first_answer = next(i for i, c in enumerate(chunks) if c.text)
    assert first_thought < first_answer


def test_the_last_chunk_counts_the_thinking_tokens_the_server_says(server: Server) -> None:
    chunks = chunks_of(server, ask(Thinking(budget=5), 24))
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.reasoning_tokens == 5  # completion_tokens_details.reasoning_tokens: the budget, not its forced end


def test_the_think_switch_off_reaches_the_server_through_the_template(server: Server) -> None:
    chunks = chunks_of(server, ask(Thinking(enabled=False), 12))
    prompt = prompt_of(server, chat_template_kwargs={"enable_thinking": False})
    assert prompt.endswith("<think>\n\n</think>\n\n")
    assert "".join(c.reasoning for c in chunks) == ""
    assert "".join(c.text for c in chunks) == raw(server, prompt, 12)


def test_the_body_gives_earlier_thinking_back_and_asks_the_switch_and_budget() -> None:
    messages = (
        ChatMessage("user", "Hi"),
        ChatMessage("assistant", "Hello.", reasoning="A greeting."),
        ChatMessage("user", "Bye"),
    )
    request = ChatRequest(MODEL, messages, thinking=Thinking(enabled=True, budget=32), template_kwargs={"x": 1})
    body = chat_body(request)
    assert body["messages"] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "reasoning_content": "A greeting."},
        {"role": "user", "content": "Bye"},
    ]
    assert body["chat_template_kwargs"] == {"x": 1, "enable_thinking": True}
    assert body["reasoning_budget_tokens"] == 32
    assert "reasoning_format" not in body and "reasoning_effort" not in body


def test_a_request_that_asks_nothing_of_the_thinking_leaves_the_server_its_defaults() -> None:
    body = chat_body(ask(Thinking(), 8))
    assert not {"chat_template_kwargs", "reasoning_budget_tokens", "reasoning_effort", "reasoning_format"} & set(body)
