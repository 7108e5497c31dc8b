"""A reasoning model's reply in the app, on the real engine and the reasoning test model (tests/reasoning_model.py):
the thinking streams into a block above the answer that collapses once the answer starts, Ctrl+R toggles it, it
is stored apart from the answer and given back with the history, and the F2 dialog switches it per conversation.
The model never closes its thinking itself, so a greedy reply with a thinking budget is the same every time.

A reply runs to its token limit (``RunsToItsLimit``: the model's end token is not taken), so that the thinking and
the answer these tests look at are there whatever the CPU: a model's greedy text differs between CPUs, and an end
token taken early, right after the budget closes the thinking, would leave no answer to see."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from textual.pilot import Pilot

from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationSettings, ConversationStore, StoredMessage
from localinfer.app.tui.replies import chat_request
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.widgets.message import MessageView
from localinfer.app.tui.widgets.thinking import ThinkingBlock, thinking_summary
from localinfer.client.base import InferenceClient
from localinfer.config import Settings
from localinfer.models.store import Manifest
from localinfer.types import ChatMessage, ChatRequest, Thinking, TokenChunk, Usage
from tests.app.tui.conftest import AppFactory, ForwardingClient, register, wait_for

pytestmark = pytest.mark.model

MODEL = "smollm2-think"
QUESTION = "What is the capital of France?"
BUDGETED = ConversationSettings(temperature=0.0, max_tokens=24, thinking_budget=6)


class RunsToItsLimit(ForwardingClient):
    """The app's real client, except that each reply runs to its ``max_tokens`` (``ignore_eos``)."""

    def chat(self, request: ChatRequest) -> AsyncGenerator[TokenChunk, None]:
        assert request.options.max_tokens is not None, "a reply that runs to its limit needs one"
        options = dataclasses.replace(request.options, ignore_eos=True)
        return self.client.chat(dataclasses.replace(request, options=options))


def thinking_app(make_app: AppFactory, **kwargs: Any) -> LocalInferApp:
    """The app on the reasoning model, its replies running to their limits."""
    app = make_app(default_model=MODEL, **kwargs)
    app.client = RunsToItsLimit(app.client)
    return app


@pytest.fixture
def with_thinker(tui_settings: Settings, smollm2_think: Manifest) -> Settings:
    register(tui_settings, smollm2_think, MODEL)
    return tui_settings


def thinking_chat(store: ConversationStore, settings: ConversationSettings = BUDGETED) -> int:
    """A conversation with the reasoning model (the one the app opens), greedy, with ``settings``."""
    return store.create(model=MODEL, settings=settings).id


async def reply_of(client: InferenceClient, request: ChatRequest) -> tuple[str, str, Usage | None]:
    """The thinking, the answer and the usage the client streams for ``request``."""
    thinking, answer, usage = "", "", None
    async with contextlib.aclosing(client.chat(request)) as stream:
        async for chunk in stream:
            thinking, answer, usage = thinking + chunk.reasoning, answer + chunk.text, chunk.usage or usage
    return thinking, answer, usage


async def ask(app_chat: ChatScreen, pilot: Pilot[None], text: str = QUESTION) -> MessageView:
    """Send ``text`` and wait for the whole reply; its view."""
    await pilot.press(*text, "enter")
    await wait_for(lambda: len(app_chat.query(MessageView)) == 2, what="the reply to start")
    await wait_for(lambda: not app_chat.generating, what="the reply to finish")
    return list(app_chat.query(MessageView))[-1]


def block_of(view: MessageView) -> ThinkingBlock:
    block = view.thinking_block
    assert block is not None
    return block


async def test_a_reply_keeps_its_thinking_apart_from_the_answer_as_the_engine_streams_them(
    with_thinker: Settings, conversations: ConversationStore, make_app: AppFactory
) -> None:
    conversation_id = thinking_chat(conversations)
    app = thinking_app(make_app)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        view = await ask(chat, pilot)
        user = app.store.messages(conversation_id)[0]
        thinking, answer, usage = await reply_of(app.client, chat_request(MODEL, BUDGETED, [user]))
        stored = app.store.messages(conversation_id)[-1]
        assert thinking and answer
        assert (stored.reasoning, stored.content, stored.state) == (thinking, answer, "complete")
        assert (view.reasoning, view.content) == (thinking, answer)
        assert usage is not None
        assert stored.thinking_tokens == usage.reasoning_tokens
        assert stored.thinking_ms is not None


async def test_the_thinking_collapses_to_its_summary_once_the_answer_starts(
    with_thinker: Settings, conversations: ConversationStore, make_app: AppFactory
) -> None:
    conversation_id = thinking_chat(conversations)
    ticks = iter(range(1000))
    app = thinking_app(make_app, clock=lambda: next(ticks) / 10)  # each read 0.1 s later
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        block = block_of(await ask(chat, pilot))
        stored = app.store.messages(conversation_id)[-1]
        assert stored.thinking_ms is not None and stored.thinking_tokens is not None
        assert not block.expanded
        summary = thinking_summary(
            thinking=False, seconds=stored.thinking_ms / 1000, tokens=stored.thinking_tokens, expanded=False
        )
        assert str(block.query_one(".thinking-summary").render()) == summary
        assert not block.query_one(".thinking-text").display


async def test_ctrl_r_expands_and_collapses_the_latest_thinking(
    with_thinker: Settings, conversations: ConversationStore, make_app: AppFactory
) -> None:
    thinking_chat(conversations)
    app = thinking_app(make_app)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        view = await ask(chat, pilot)
        block = block_of(view)
        await pilot.press("ctrl+r")
        assert block.expanded
        assert str(block.query_one(".thinking-text").render()) == view.reasoning.strip()
        assert str(block.query_one(".thinking-summary").render()).startswith("▼ Thought for ")
        await pilot.press("ctrl+r")
        assert not block.expanded


async def test_a_reply_cut_while_thinking_keeps_its_thinking_open_and_has_no_answer(
    with_thinker: Settings, conversations: ConversationStore, make_app: AppFactory
) -> None:
    conversation_id = thinking_chat(conversations, ConversationSettings(temperature=0.0, max_tokens=8))
    app = thinking_app(make_app)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        view = await ask(chat, pilot)
        stored = app.store.messages(conversation_id)[-1]
        assert (stored.content, stored.thinking_tokens) == ("", 8)
        assert stored.reasoning.strip() and view.reasoning == stored.reasoning
        assert block_of(view).expanded


async def test_the_think_switch_off_asks_for_a_reply_with_no_thinking(
    with_thinker: Settings, conversations: ConversationStore, make_app: AppFactory
) -> None:
    settings = ConversationSettings(temperature=0.0, max_tokens=12, think=False)
    conversation_id = thinking_chat(conversations, settings)
    app = thinking_app(make_app)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        view = await ask(chat, pilot)
        user, reply = app.store.messages(conversation_id)
        thinking, answer, _ = await reply_of(app.client, chat_request(MODEL, settings, [user]))
        thought, _, _ = await reply_of(app.client, chat_request(MODEL, BUDGETED, [user]))
        assert thought  # the same question, thinking on, thinks
        assert thinking == ""
        assert (reply.reasoning, reply.content, reply.thinking_ms, reply.thinking_tokens) == ("", answer, None, None)
        assert view.thinking_block is None


async def test_f2_sets_the_think_switch_and_budget_of_the_conversation(
    with_thinker: Settings, conversations: ConversationStore, make_app: AppFactory
) -> None:
    conversation_id = thinking_chat(conversations, ConversationSettings())
    app = thinking_app(make_app)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f2")
        await pilot.pause()
        app.screen.query_one("#think").value = "off"  # type: ignore[attr-defined]
        app.screen.query_one("#thinking-budget").value = "16"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await pilot.pause()
        settings = app.store.get(conversation_id).settings
        assert (settings.think, settings.thinking_budget) == (False, 16)
        await pilot.press("f2")
        await pilot.pause()
        app.screen.query_one("#think").value = "model default"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.store.get(conversation_id).settings.think is None


async def test_a_stored_reply_reopens_with_its_thinking_collapsed_and_its_time_and_tokens(
    with_thinker: Settings, conversations: ConversationStore, make_app: AppFactory
) -> None:
    conversation_id = thinking_chat(conversations)
    conversations.add_message(conversation_id, "user", QUESTION)
    reply = conversations.add_message(conversation_id, "assistant", "", state="streaming", model=MODEL)
    conversations.update_message(
        reply.id,
        content="Paris.",
        state="complete",
        reasoning="France's capital.",
        thinking_ms=1234.0,
        thinking_tokens=48,
    )
    app = thinking_app(make_app)
    async with app.run_test(size=(100, 30)):
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        block = block_of(list(chat.query(MessageView))[-1])
        assert not block.expanded
        assert str(block.query_one(".thinking-summary").render()) == "▶ Thought for 1.2 s · 48 tokens"


def stored(role: str, content: str, reasoning: str = "", state: str = "complete") -> StoredMessage:
    return StoredMessage(0, 1, role, content, state, MODEL, 0.0, reasoning=reasoning)  # type: ignore[arg-type]


def test_the_history_gives_each_reply_its_thinking_back_and_asks_the_conversations_switch() -> None:
    history = [stored("user", "Hi"), stored("assistant", "Hello.", "A greeting."), stored("user", "Bye")]
    request = chat_request(MODEL, ConversationSettings(think=True, thinking_budget=32), history)
    assert request.messages == (
        ChatMessage("user", "Hi"),
        ChatMessage("assistant", "Hello.", reasoning="A greeting."),
        ChatMessage("user", "Bye"),
    )
    assert request.thinking == Thinking(enabled=True, budget=32)
