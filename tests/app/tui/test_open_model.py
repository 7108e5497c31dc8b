"""The app opens what it is given, as ``run`` and ``serve`` do: ``localinfer --model ./X.gguf`` on an empty home
opens the chat on that model (not the models screen), in the app alone, with ``--serve``, and with ``--host`` (a
reference the server pulls first). Built as the command line builds it (``build_app``), driven with a pilot."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localinfer.app.cli import build_parser
from localinfer.app.commands.tui import build_app
from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.screens.models import ModelsScreen
from localinfer.app.tui.widgets.message import MessageView
from localinfer.config import Settings
from localinfer.models.store import Manifest
from tests.app.commands.test_pull_cli import SMOL_FILE, SMOL_REPO, hub_env
from tests.app.server.conftest import free_port, serving
from tests.app.tui.conftest import wait_for
from tests.hub_standin import HubStandIn

pytestmark = pytest.mark.model

FILE_NAME = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture
def fresh(tmp_path: Path) -> Settings:
    """An empty home: no model, no conversation, no discovery of this machine's other tools."""
    return Settings().with_overrides(
        home=tmp_path / "home", discover=False, ctx_size=512, parallel=1, threads=2, log_level="warning"
    )


@pytest.fixture
def gguf(smollm2: Manifest, tmp_path: Path) -> Path:
    """SmolLM2's file in the current folder under its usual name, as a new user has it after a download."""
    link = tmp_path / f"{FILE_NAME}.gguf"
    link.symlink_to(smollm2.path)
    return link


def app_for(settings: Settings, *argv: str) -> LocalInferApp:
    return build_app(build_parser().parse_args(list(argv)), settings)


async def answers_in_the_chat(app: LocalInferApp, model: str) -> None:
    """The app opened its chat on ``model`` (never the models screen), and a message typed gets a reply from it."""
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.chat_screen
        await wait_for(lambda: chat.model == model, what=f"the chat on {model}")
        await pilot.pause()
        assert not any(isinstance(s, ModelsScreen) for s in app.screen_stack)
        assert app.screen is chat
        await pilot.press(*"Hi", "enter")
        await wait_for(lambda: len(chat.query(MessageView)) == 2, what="the reply")
        await wait_for(lambda: not chat.generating, what="the reply to end")
        reply = app.store.messages(chat.conversation.id if chat.conversation else 0)[-1]
        assert reply.state == "complete", reply.error
        assert reply.model == model and reply.content.strip()


async def test_the_app_opens_the_chat_on_a_gguf_path_given_on_an_empty_home(fresh: Settings, gguf: Path) -> None:
    app = app_for(fresh, "--model", str(gguf))
    assert isinstance(app, LocalInferApp)
    await answers_in_the_chat(app, FILE_NAME)


async def test_the_app_with_serve_opens_the_chat_on_the_path_and_serves_it_by_that_name(
    fresh: Settings, gguf: Path
) -> None:
    port = free_port()
    app = app_for(fresh, "--model", str(gguf), "--serve", "--port", str(port))
    await answers_in_the_chat(app, FILE_NAME)


@pytest.fixture(scope="module")
def hub(smollm2: Manifest) -> Iterator[HubStandIn]:
    with HubStandIn() as standin:
        standin.add_repo(SMOL_REPO, {SMOL_FILE: smollm2.path})
        yield standin


def test_the_app_on_a_host_has_the_server_pull_the_reference_then_opens_the_chat_on_it(
    hub: HubStandIn, fresh: Settings, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    env = {**hub_env(hub.url, tmp_path), "LOCALINFER_DISCOVER": "false"}
    with serving("", tmp_path / "server-home", tmp_path, "--ctx-size", "512", env=env) as server:
        app = app_for(fresh, "--host", server.url, "--model", f"hf.co/{SMOL_REPO}")  # before the app's loop, as the CLI
        assert SMOL_FILE in capfd.readouterr().err  # the server's pull, its progress shown here
        asyncio.run(answers_in_the_chat(app, SMOL_REPO))
        loaded = httpx.get(f"{server.url}/api/ps", timeout=30).json()["models"]
        assert f"{SMOL_REPO}:latest" in {m["name"] for m in loaded}


def test_a_path_with_host_is_one_line_before_the_app_opens(fresh: Settings, gguf: Path) -> None:
    from localinfer.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot open it"):
        app_for(fresh, "--host", "http://127.0.0.1:9", "--model", str(gguf))
    assert os.path.exists(gguf)
