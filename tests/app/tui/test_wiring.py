"""The app on a running ``localinfer serve`` (``--host URL``), and the app serving the API itself (``--serve``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from localinfer.app.commands.tui import api_server
from localinfer.app.server.app import create_app
from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.widgets.message import MessageView
from localinfer.app.tui.widgets.status import StatusBar
from localinfer.client.local import LocalClient
from localinfer.client.remote import HttpClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.library import ModelLibrary
from localinfer.models.store import Manifest
from tests.app.server.conftest import free_port
from tests.app.server.management import API_KEY, SERVED, ManagedServer, managed_server
from tests.app.tui.conftest import wait_for


@pytest.fixture(scope="module")
def remote(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedServer]:
    with managed_server(smollm2, tmp_path_factory.mktemp("tui-remote"), "--ctx-size", "2048") as server:
        yield server


async def test_the_app_chats_through_a_running_server(remote: ManagedServer, tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    store.create(model=SERVED, settings=ConversationSettings(max_tokens=24))
    app = LocalInferApp(HttpClient(remote.url, api_key=API_KEY), store, default_model=SERVED, export_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await pilot.press(*"Say hello.", "enter")
        await wait_for(lambda: len(chat.query(MessageView)) == 2)
        await wait_for(lambda: not chat.generating)
        reply = list(chat.query(MessageView))[-1]
        assert reply.content.strip()
        assert "tok/s" in str(reply.query_one(".stats").render())
        await wait_for(lambda: remote.url in str(chat.query_one(StatusBar).render()), what="the server in the status")


async def test_serve_shares_the_model_the_app_loaded(with_smollm2: Settings, short_chat: int, tmp_path: Path) -> None:
    settings = with_smollm2.with_overrides(port=free_port())
    library = ModelLibrary.from_settings(settings)
    engine = Engine(settings, library)
    client = LocalClient(engine, library, settings, serving=f"http://127.0.0.1:{settings.port}")
    store = ConversationStore(settings.home / "conversations.sqlite3")
    serve = api_server(create_app(engine, client=client), settings)
    app = LocalInferApp(client, store, default_model="smollm2", export_dir=tmp_path, background=serve)
    async with app.run_test(size=(100, 30)):
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        url = f"http://127.0.0.1:{settings.port}"
        await wait_for(lambda: "llamacpp:" in str(chat.query_one(StatusBar).render()), what="the model to load")
        await wait_for(lambda: _answers(url), what="the API to answer")
        api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        reply = await api.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=8
        )
        assert reply.choices[0].message.content
        async with httpx.AsyncClient() as http:
            ps = (await http.get(f"{url}/api/ps")).json()
        assert [m["name"] for m in ps["models"]] == ["smollm2:latest"]  # the one engine, the one loaded model
        assert f"serving {url}" in str(chat.query_one(StatusBar).render())


async def _answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient() as http:
            return (await http.get(f"{url}/health")).status_code == 200
    except httpx.HTTPError:
        return False
