"""The tool loop end to end on real llama.cpp decoding (SmolLM2 and Gemma 3) and a real MCP server: the first
call is forced (``tool_choice`` names the tool, so the engine constrains the reply to that call's JSON), whatever
numbers the model picks; the server's answer goes back; the next request offers no tools (a step limit of one),
so the model answers in text. Nothing here depends on the CPU's greedy text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from localinfer.app.tools.hub import McpHub
from localinfer.app.tools.loop import CallEnded, LoopEvent, TextStreamed, ToolLoop, ToolPolicy
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.library import ModelLibrary
from localinfer.models.store import Manifest, ModelStore
from localinfer.types import ChatMessage, ChatRequest, GenerationOptions, SamplingParams
from tests.app.tools.conftest import stdio_spec

pytestmark = pytest.mark.model


@pytest.fixture(params=["smollm2", "gemma3"])
def model(request: pytest.FixtureRequest) -> Manifest:
    manifest: Manifest = request.getfixturevalue(request.param)
    return manifest


@pytest.fixture
async def client(model: Manifest, tmp_path: Path) -> AsyncIterator[LocalClient]:
    home = tmp_path / "home"
    settings = Settings().with_overrides(home=home, discover=False, ctx_size=2048, parallel=1, threads=2)
    ModelStore(settings.models_dir).register(model)
    library = ModelLibrary.from_settings(settings)
    local = LocalClient(Engine(settings, library), library, settings)
    yield local
    await local.close()


@pytest.fixture
async def hub() -> AsyncIterator[McpHub]:
    hub = McpHub({"calc": stdio_spec("calc")})
    await hub.connect("calc")
    yield hub
    await hub.close()


async def test_a_forced_call_runs_on_the_server_and_the_model_answers_after_it(
    client: LocalClient, hub: McpHub, model: Manifest
) -> None:
    events: list[LoopEvent] = []

    async def record(event: LoopEvent) -> None:
        events.append(event)

    loop = ToolLoop(client, hub, ToolPolicy({"calc/add"}), None, record, steps=1)
    options = GenerationOptions(sampling=SamplingParams(temperature=0.0), max_tokens=64)
    request = ChatRequest(model.name, (ChatMessage("user", "What is 2 plus 3? Use the add tool."),), options)
    added = await loop.run(ChatRequest(request.model, request.messages, options, tool_choice="add"))

    assert len(added) == 3, added
    first, result, answer = added
    assert len(first.tool_calls) == 1 and first.tool_calls[0].name == "add"
    arguments = first.tool_calls[0].arguments
    assert isinstance(arguments["a"], int) and isinstance(arguments["b"], int)  # the schema held
    records = [e.record for e in events if isinstance(e, CallEnded)]
    assert [r.status for r in records] == ["ok"]
    assert result.role == "tool" and result.content == f"calc: {arguments['a'] + arguments['b']}"
    assert answer.role == "assistant" and not answer.tool_calls
    after = events[events.index(next(e for e in events if isinstance(e, CallEnded))) :]
    assert any(isinstance(e, TextStreamed) for e in after)  # the answer streamed through the same events
