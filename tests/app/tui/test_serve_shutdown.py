"""``localinfer --serve``: SIGTERM stops the API it serves as it stops ``localinfer serve`` (the grace period of
``shutdown_timeout``, then each stream ended properly), and the app goes with it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx

from localinfer.app.commands.tui import api_server
from localinfer.app.server.app import create_app
from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationStore
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.library import ModelLibrary
from tests.app.server.conftest import free_port
from tests.app.tui.conftest import wait_for


async def test_sigterm_ends_the_api_streams_properly_and_the_app_exits(
    with_smollm2: Settings, short_chat: int, tmp_path: Path
) -> None:
    settings = with_smollm2.with_overrides(port=free_port(), shutdown_timeout=0.5, ctx_size=2048)
    library = ModelLibrary.from_settings(settings)
    engine = Engine(settings, library)
    client = LocalClient(engine, library, settings, serving=f"http://127.0.0.1:{settings.port}")
    store = ConversationStore(settings.home / "conversations.sqlite3")
    app: LocalInferApp | None = None
    serve = api_server(
        create_app(engine, client=client),
        settings,
        end_requests=client.shutdown,
        on_stopped=lambda: app.exit() if app is not None else None,
    )
    app = LocalInferApp(client, store, default_model="smollm2", export_dir=tmp_path, background=serve)
    url = f"http://127.0.0.1:{settings.port}"
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": 2000,
        "ignore_eos": True,
        "stream": True,
    }
    events: list[Any] = []
    async with app.run_test(size=(100, 30)):
        await wait_for(lambda: _answers(url), what="the API to answer")
        async with (
            httpx.AsyncClient(timeout=120) as http,
            http.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
        ):
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
                if len(events) == 3:  # streaming: the signal comes now
                    os.kill(os.getpid(), signal.SIGTERM)
        await wait_for(lambda: not app.is_running, what="the app to exit")
    *_, finish, error, done = events
    assert done == "[DONE]"
    assert error["error"]["code"] == "server_shutting_down"
    assert [c["finish_reason"] for c in finish["choices"]] == ["abort"]


async def _answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient() as http:
            await http.get(f"{url}/health")  # listening (the model loads on the first request)
            return True
    except httpx.HTTPError:
        return False
