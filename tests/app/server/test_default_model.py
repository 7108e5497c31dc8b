"""A request that names no model (llama.vim's instruct, llama.vscode, curl users of llama-server) goes to the
server's default model in every dialect, and is a 400 listing the names when there is none."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from localinfer.app.server.app import create_app
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.store import ModelStore
from tests.app.server.conftest import Server

HI = [{"role": "user", "content": "Hi"}]


@pytest.mark.model
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": HI, "max_tokens": 4, "temperature": 0}),
        ("/v1/chat/completions", {"model": "", "messages": HI, "max_tokens": 4, "temperature": 0}),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "temperature": 0}),
        ("/api/chat", {"messages": HI, "options": {"num_predict": 4}, "stream": False}),
        ("/api/generate", {"prompt": "Hi", "options": {"num_predict": 4}, "stream": False}),
    ],
)
def test_no_model_is_the_served_one(
    smollm2_server: Server, model_name: str, path: str, body: dict[str, object]
) -> None:
    reply = httpx.post(f"{smollm2_server.url}{path}", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["model"] == model_name
    assert answer.get("choices") or answer.get("message") or answer.get("response")


def test_no_model_and_no_default_is_a_400_listing_the_names(tmp_path: Path) -> None:
    async def scenario() -> None:
        settings = Settings(home=tmp_path)
        app = create_app(Engine(settings, ModelStore(settings.models_dir)))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            openai_reply = await http.post("/v1/chat/completions", json={"messages": HI})
            assert openai_reply.status_code == 400
            error = openai_reply.json()["error"]
            assert error["param"] == "model"
            assert "names no model" in error["message"] and "localinfer pull" in error["message"]
            ollama_reply = await http.post("/api/chat", json={"messages": HI})
            assert ollama_reply.status_code == 400
            assert "names no model" in ollama_reply.json()["error"]

    asyncio.run(scenario())
