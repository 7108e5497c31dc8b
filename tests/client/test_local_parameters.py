"""The in-process client (the app without a server, ``run`` without one) fills what its caller left unchosen from
the model's own parameters (a Modelfile's PARAMETER lines), as a server's dialects and HttpClient's server do; what
the caller chose wins."""

from __future__ import annotations

import asyncio
from pathlib import Path

from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.create import create, spec_from_modelfile
from localinfer.models.library import ModelLibrary
from localinfer.models.modelfile import parse
from localinfer.models.store import Manifest, ModelStore, local_manifest
from localinfer.types import ChatMessage, ChatRequest, GenerationOptions, TokenChunk

MESSAGES = (ChatMessage("user", "Write a long story about the sea."),)


async def generated(client: LocalClient, request: ChatRequest) -> int:
    tokens = 0
    async for chunk in client.chat(request):
        if isinstance(chunk, TokenChunk) and chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return tokens


def test_a_made_models_token_limit_applies_unless_the_request_sets_its_own(smollm2: Manifest, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, discover=False)
    store = ModelStore(settings.models_dir)
    store.register(local_manifest(smollm2.path, name="base", sha256=smollm2.files[0].sha256))
    library = ModelLibrary(store, None)
    text = "FROM base\nPARAMETER num_predict 3\nPARAMETER temperature 0\n"
    create(library, "short", spec_from_modelfile(parse(text), tmp_path), settings)

    async def scenario() -> tuple[int, int]:
        engine = Engine(settings, library)
        client = LocalClient(engine, library, settings)
        try:
            left = await generated(client, ChatRequest("short", MESSAGES))
            own = await generated(client, ChatRequest("short", MESSAGES, GenerationOptions(max_tokens=5)))
        finally:
            await client.close()
        return left, own

    assert asyncio.run(scenario()) == (3, 5)
