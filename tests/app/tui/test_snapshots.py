"""Snapshots of the chat, models and pull screens at 80x24 and 120x40, on the real engine and model.

The status bar's memory figures change from run to run, so the client here reports a fixed status; everything
else is the real app. Update after a deliberate change with ``pytest tests/app/tui --snapshot-update``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.screens.models import ModelsScreen
from localinfer.app.tui.widgets.prompt import PromptInput
from localinfer.app.tui.widgets.status import StatusBar
from localinfer.client.base import ClientStatus, LoadedModelStatus
from localinfer.config import Settings
from localinfer.models.store import Manifest
from localinfer.progress import ProgressEvent
from tests.app.tui.conftest import AppFactory, ForwardingClient, register, wait_for

SIZES = [(80, 24), (120, 40)]
STATUS = ClientStatus(
    where="in-process",
    loaded=(LoadedModelStatus("smollm2", "llamacpp", 2048, 1, threads=2, size_bytes=98_000_000, expires_in=300.0),),
    memory_used=512_000_000,
    memory_total=24_000_000_000,
    memory_available=20_000_000_000,
)

REPLY = """The capital of France is **Paris**. In Python:

```python
capitals = {"France": "Paris"}
print(capitals["France"])
```
"""


class FixedStatusClient(ForwardingClient):
    """The real client, except that its status does not move."""

    async def status(self) -> ClientStatus:
        return STATUS


@pytest.fixture
def snapshot_app(
    with_smollm2: Settings, make_app: AppFactory, gemma3: Manifest, conversations: ConversationStore
) -> Callable[..., LocalInferApp]:
    register(with_smollm2, gemma3, "gemma3")
    older = conversations.create(title="Sourdough starter", model="smollm2")
    conversations.add_message(older.id, "user", "How do I feed a starter?")
    current = conversations.create(
        title="Capital of France", model="smollm2", settings=ConversationSettings(system_prompt="Be brief.")
    )
    conversations.add_message(current.id, "user", "What is the capital of France? Show it in Python.")
    reply = conversations.add_message(current.id, "assistant", "", state="streaming", model="smollm2")
    conversations.update_message(reply.id, content=REPLY, state="complete", ttft_ms=41.0, tokens_per_second=96.5)

    def factory(**kwargs: Any) -> LocalInferApp:
        app = make_app(poll_status=False, **kwargs)
        app.client = FixedStatusClient(app.client)
        return app

    return factory


async def settled(pilot: Pilot[None]) -> None:
    """Wait until the model is loaded and the screen has drawn what it fetched, with the prompt's cursor held still
    (it blinks every half second, and on a loaded machine the picture was taken in either phase)."""
    app = pilot.app
    assert isinstance(app, LocalInferApp)
    await wait_for(lambda: isinstance(app.screen, ChatScreen) and not app.screen.query_one(StatusBar).activity)
    for prompt in app.screen.query(PromptInput):
        prompt.cursor_blink = False
    await pilot.pause()


async def on_models(pilot: Pilot[None]) -> None:
    await settled(pilot)
    await pilot.press("ctrl+o")
    screen = pilot.app.screen
    assert isinstance(screen, ModelsScreen)
    await wait_for(lambda: len(screen.models) == 2)
    await pilot.pause()


async def on_pull(pilot: Pilot[None]) -> None:
    await on_models(pilot)
    await pilot.press("p", *"bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M")
    screen = pilot.app.screen
    assert isinstance(screen, ModelsScreen)
    event = ProgressEvent("pulling SmolLM2-135M-Instruct-Q4_K_M.gguf", total=105_000_000, completed=42_000_000)
    screen.show_progress(event)
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_chat_screen(snap_compare: Any, snapshot_app: Callable[..., LocalInferApp], size: tuple[int, int]) -> None:
    assert snap_compare(snapshot_app(), terminal_size=size, run_before=settled)


def test_chat_screen_light_theme(snap_compare: Any, snapshot_app: Callable[..., LocalInferApp]) -> None:
    assert snap_compare(snapshot_app(), terminal_size=(80, 24), press=["ctrl+t"], run_before=settled)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_models_screen(snap_compare: Any, snapshot_app: Callable[..., LocalInferApp], size: tuple[int, int]) -> None:
    assert snap_compare(snapshot_app(), terminal_size=size, run_before=on_models)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_pull_screen(snap_compare: Any, snapshot_app: Callable[..., LocalInferApp], size: tuple[int, int]) -> None:
    assert snap_compare(snapshot_app(), terminal_size=size, run_before=on_pull)
