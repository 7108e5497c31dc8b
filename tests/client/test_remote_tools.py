"""``HttpClient`` with tools, against a real ``localinfer serve``: the app on ``--host`` and ``run --mcp`` through a
running server get the model's calls as the in-process client gives them, and give the tools' answers back. The
call is forced (``tool_choice`` names the function), so the test holds whatever the CPU's greedy text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from localinfer.client.remote import HttpClient
from localinfer.models.store import Manifest
from localinfer.types import ChatMessage, ChatRequest, GenerationOptions, SamplingParams, TokenChunk, Tool
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

ADD = Tool(
    "add",
    "Add two whole numbers.",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
)
OPTIONS = GenerationOptions(sampling=SamplingParams(temperature=0.0), max_tokens=32)


@pytest.fixture(scope="module")
def server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("remote-tools"), "--ctx-size", "2048") as running:
        yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[HttpClient]:
    http = HttpClient(server.url)
    yield http
    await http.close()


async def last_chunk(client: HttpClient, request: ChatRequest) -> TokenChunk:
    chunks = [chunk async for chunk in client.chat(request)]
    return chunks[-1]


async def test_a_forced_call_comes_back_as_a_tool_call_and_its_answer_goes_back(
    client: HttpClient, smollm2: Manifest
) -> None:
    messages = (ChatMessage("user", "What is 2 plus 3?"),)
    request = ChatRequest(smollm2.name, messages, OPTIONS, tools=(ADD,), tool_choice="add")
    last = await last_chunk(client, request)
    assert last.finish_reason == "tool_calls"
    (call,) = last.tool_calls
    assert call.name == "add" and call.id
    assert isinstance(call.arguments["a"], int) and isinstance(call.arguments["b"], int)
    answer = ChatMessage("tool", "5", tool_call_id=call.id, name="add")
    again = ChatRequest(smollm2.name, (*messages, ChatMessage("assistant", "", tool_calls=(call,)), answer), OPTIONS)
    final = await last_chunk(client, again)  # the server took the call and its answer back
    assert final.finish_reason in ("stop", "length") and not final.tool_calls
