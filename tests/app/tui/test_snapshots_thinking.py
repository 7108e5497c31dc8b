"""Snapshots of a reasoning model's reply: its thinking collapsed above the answer, expanded, streaming in while the
model still thinks, and the F2 dialog's think switch. The app runs on the real engine with the reasoning test model
(tests/reasoning_model.py) loaded, but the reply is scripted (REPLY): a model's greedy text differs between CPUs
(a near-tie goes the other way), and a picture must not depend on the CPU it is drawn on. tests/app/tui/
test_thinking.py checks the real model's thinking in the app.

What a run measures would change the picture, so it is fixed: the status (as test_snapshots.py), the reply's
decoding speed (the last piece's ``timings``), and the app's clock, which moves 50 ms each time the app reads it
(once a piece: the first token and the thinking's time are counted in pieces). Update after a deliberate change
with ``pytest tests/app/tui --snapshot-update``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.widgets.message import MessageView
from localinfer.app.tui.widgets.prompt import PromptInput
from localinfer.app.tui.widgets.status import StatusBar
from localinfer.client.base import ClientStatus, InferenceClient, LoadedModelStatus
from localinfer.config import Settings
from localinfer.models.store import Manifest
from localinfer.types import ChatRequest, Timings, TokenChunk, Usage
from tests.app.tui.conftest import AppFactory, register, wait_for
from tests.app.tui.test_snapshots import FixedStatusClient

pytestmark = pytest.mark.model

MODEL = "smollm2-think"
QUESTION = "Tell me about the moon."
SETTINGS = ConversationSettings(temperature=0.0, max_tokens=32, think=True, thinking_budget=10)
HOLD_AFTER = 4  # pieces of thinking streamed before the picture of a reply still thinking
STATUS = ClientStatus(
    where="in-process",
    loaded=(LoadedModelStatus(MODEL, "llamacpp", 2048, 1, threads=2, size_bytes=98_000_000, expires_in=300.0),),
    memory_used=512_000_000,
    memory_total=24_000_000_000,
    memory_available=20_000_000_000,
)
TIMINGS = Timings(prompt_ms=20.0, predicted_ms=250.0, prompt_n=18, predicted_n=26)  # 100 tok/s
# The reply, a piece a token: ten of thinking (the budget), then the answer, cut at max_tokens.
THOUGHT = ["The", " user", " asks", " about", " the", " moon", ".", " It", " orbits", " Earth"]
ANSWER = ["The", " moon", " is", " Earth", "'s", " only", " natural", " satellite", ".", " It", " orbits", " us"]
ANSWER += [" every", " 27", " days", ",", " and", " its", " pull", " moves", " the", " tides"]


class SteadyClient(FixedStatusClient):
    """The real client with a fixed status, whose chat answers with the scripted reply (THOUGHT, then ANSWER, at
    TIMINGS' speed); with ``hold_after``, the reply is held after that many pieces of thinking (the app closes with
    it still thinking). The request is checked to be the one the conversation's settings make."""

    def __init__(self, client: InferenceClient, hold_after: int | None) -> None:
        super().__init__(client)
        self.hold_after = hold_after

    async def status(self) -> ClientStatus:
        return STATUS

    async def chat(self, request: ChatRequest) -> AsyncGenerator[TokenChunk, None]:
        assert request.model == MODEL and request.messages[-1].content == QUESTION
        assert request.options.max_tokens == SETTINGS.max_tokens
        for thought, piece in enumerate(THOUGHT, start=1):
            yield TokenChunk("", reasoning=piece)
            if thought == self.hold_after:
                await asyncio.get_running_loop().create_future()  # never done: cancelled when the app closes
        for piece in ANSWER:
            yield TokenChunk(piece)
        usage = Usage(TIMINGS.prompt_n, len(THOUGHT) + len(ANSWER), reasoning_tokens=len(THOUGHT))
        yield TokenChunk("", finish_reason="length", usage=usage, timings=TIMINGS)


@pytest.fixture
def thinking_app(
    tui_settings: Settings, smollm2_think: Manifest, make_app: AppFactory, conversations: ConversationStore
) -> Callable[..., LocalInferApp]:
    """``thinking_app(hold_after=None)``: the app on a conversation with the reasoning model."""
    register(tui_settings, smollm2_think, MODEL)
    conversations.create(title="The moon", model=MODEL, settings=SETTINGS)

    def factory(hold_after: int | None = None) -> LocalInferApp:
        ticks = itertools.count()
        app = make_app(poll_status=False, default_model=MODEL, clock=lambda: next(ticks) * 0.05)
        app.client = SteadyClient(app.client, hold_after)
        return app

    return factory


def chat_of(pilot: Pilot[None]) -> ChatScreen:
    screen = pilot.app.screen
    assert isinstance(screen, ChatScreen)
    return screen


async def loaded(pilot: Pilot[None]) -> None:
    """Wait until the model is loaded, with the prompt's cursor held still (it blinks every half second)."""
    app = pilot.app
    await wait_for(lambda: isinstance(app.screen, ChatScreen) and not app.screen.query_one(StatusBar).activity)
    app.screen.query_one(PromptInput).cursor_blink = False


async def answered(pilot: Pilot[None]) -> None:
    """Ask the question and wait for the whole reply."""
    await loaded(pilot)
    chat = chat_of(pilot)
    await pilot.press(*QUESTION, "enter")
    await wait_for(lambda: len(chat.query(MessageView)) == 2, what="the reply to start")
    await wait_for(lambda: not chat.generating and not chat.query_one(StatusBar).activity, what="the reply")
    await pilot.pause()


async def expanded(pilot: Pilot[None]) -> None:
    await answered(pilot)
    await pilot.press("ctrl+r")
    await pilot.pause()


async def thinking(pilot: Pilot[None]) -> None:
    """Ask the question and wait until the held reply's thinking so far is drawn."""
    await loaded(pilot)
    chat = chat_of(pilot)
    await pilot.press(*QUESTION, "enter")
    await wait_for(lambda: len(chat.query(MessageView)) == 2, what="the reply to start")
    reply = list(chat.query(MessageView))[-1]
    await wait_for(lambda: reply.thinking_tokens == HOLD_AFTER and reply.drawn, what="the thinking to be drawn")
    await pilot.pause()


async def settings(pilot: Pilot[None]) -> None:
    await loaded(pilot)
    await pilot.press("f2")
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_thinking_collapsed(
    snap_compare: Any, thinking_app: Callable[..., LocalInferApp], size: tuple[int, int]
) -> None:
    assert snap_compare(thinking_app(), terminal_size=size, run_before=answered)


def test_thinking_expanded(snap_compare: Any, thinking_app: Callable[..., LocalInferApp]) -> None:
    assert snap_compare(thinking_app(), terminal_size=(80, 24), run_before=expanded)


def test_thinking_streaming(snap_compare: Any, thinking_app: Callable[..., LocalInferApp]) -> None:
    assert snap_compare(thinking_app(hold_after=HOLD_AFTER), terminal_size=(80, 24), run_before=thinking)


def test_settings_think_switch(snap_compare: Any, thinking_app: Callable[..., LocalInferApp]) -> None:
    assert snap_compare(thinking_app(), terminal_size=(80, 24), run_before=settings)
