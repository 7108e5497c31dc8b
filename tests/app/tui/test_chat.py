"""The chat screen, driven through Textual's pilot against the real SmolLM2 model."""

from __future__ import annotations

from pathlib import Path

from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.widgets.message import MessageView
from localinfer.config import Settings
from tests.app.tui.conftest import AppFactory, wait_for


async def test_a_prompt_gets_a_streamed_reply_with_its_speed(
    with_smollm2: Settings, short_chat: int, make_app: AppFactory
) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await pilot.press(*"What is the capital of France?")
        await pilot.press("enter")
        await wait_for(lambda: len(chat.query(MessageView)) == 2, what="the reply to start")
        reply = list(chat.query(MessageView))[-1]
        await wait_for(lambda: not chat.generating, what="the reply to finish")
        assert reply.content.strip()
        stats = str(reply.query_one(".stats").render())
        assert "tok/s" in stats and "first token" in stats
        assert chat.conversation is not None
        stored = app.store.messages(chat.conversation.id)
        assert [(m.role, m.state) for m in stored] == [("user", "complete"), ("assistant", "complete")]
        assert stored[1].content == reply.content
        assert stored[1].tokens_per_second and stored[1].tokens_per_second > 0


def reply_length(chat: ChatScreen) -> int:
    views = list(chat.query(MessageView))
    return len(views[-1].content) if len(views) == 2 else 0


def long_reply_conversation(store: ConversationStore) -> int:
    """A conversation whose replies run to 3,000 tokens: long enough to be stopped. Greedy, because a sampled reply
    may end after ~150 tokens, and ``pilot.press`` waits for the busy process to idle (up to a second or more while
    the model writes) before the test sees the reply start; SmolLM2's greedy replies to these prompts loop to the
    limit."""
    settings = ConversationSettings(temperature=0.0, max_tokens=3000)
    conversation = store.create(model="smollm2", settings=settings)
    return conversation.id


async def test_escape_stops_the_generation_at_once_and_keeps_the_text(
    with_smollm2: Settings, make_app: AppFactory, conversations: ConversationStore
) -> None:
    long_reply_conversation(conversations)
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await pilot.press(*"Tell me a very long story about a dragon and a knight.", "enter")
        await wait_for(lambda: reply_length(chat) > 20, what="the reply to start")
        await pilot.press("escape")
        await wait_for(lambda: not chat.generating, timeout=2, what="the generation to stop")
        reply = list(chat.query(MessageView))[-1]
        text = reply.content
        await pilot.pause(0.5)
        assert reply.content == text  # nothing arrives after the stop
        assert "stopped" in str(reply.query_one(".stats").render())
        assert chat.conversation is not None
        stored = app.store.messages(chat.conversation.id)[-1]
        assert (stored.state, stored.content) == ("stopped", text)
        status = await app.client.status()
        assert [m.name for m in status.loaded] == ["smollm2"]


async def test_closing_the_app_mid_reply_keeps_the_partial_reply_marked(
    with_smollm2: Settings, make_app: AppFactory, tui_settings: Settings
) -> None:
    store = ConversationStore(tui_settings.home / "conversations.sqlite3")
    conversation_id = long_reply_conversation(store)
    store.close()
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await pilot.press(*"Write a long poem about the sea.", "enter")
        await wait_for(lambda: reply_length(chat) > 20, what="the reply to start")
    reopened = ConversationStore(tui_settings.home / "conversations.sqlite3")
    reply = reopened.messages(conversation_id)[-1]
    reopened.close()
    assert reply.state == "interrupted"
    assert len(reply.content) > 20


async def test_retry_replaces_the_last_reply_and_edit_puts_the_last_message_back(
    with_smollm2: Settings, short_chat: int, make_app: AppFactory
) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await pilot.press(*"Name a fruit.", "enter")
        await wait_for(lambda: len(chat.query(MessageView)) == 2)
        await wait_for(lambda: not chat.generating)
        assert chat.conversation is not None
        first = app.store.messages(chat.conversation.id)[-1]
        await pilot.press("f3")
        await wait_for(lambda: app.store.messages(chat.conversation.id)[-1].id != first.id)  # type: ignore[union-attr]
        await wait_for(lambda: not chat.generating)
        retried = app.store.messages(chat.conversation.id)
        assert [m.role for m in retried] == ["user", "assistant"]
        assert retried[-1].state == "complete" and retried[-1].content
        await pilot.press("f4")
        await pilot.pause()
        assert app.store.messages(chat.conversation.id) == []
        assert chat.query_one("#prompt").text == "Name a fruit."  # type: ignore[attr-defined]
        assert len(chat.query(MessageView)) == 0


async def test_a_stored_conversation_reopens_from_the_sidebar(
    with_smollm2: Settings, make_app: AppFactory, conversations: ConversationStore
) -> None:
    older = conversations.create(title="Older chat", model="smollm2")
    conversations.add_message(older.id, "user", "What is 2 + 2?")
    conversations.add_message(older.id, "assistant", "It is **4**.", model="smollm2")
    newer = conversations.create(title="Newer chat", model="smollm2")
    conversations.add_message(newer.id, "user", "Hello there")
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        assert chat.conversation is not None and chat.conversation.id == newer.id
        await pilot.click(f"#conversation-{older.id}")
        await wait_for(lambda: chat.conversation is not None and chat.conversation.id == older.id)
        await pilot.pause()
        shown = [(v.role, v.content) for v in chat.query(MessageView)]
        assert shown == [("user", "What is 2 + 2?"), ("assistant", "It is **4**.")]


async def test_export_writes_the_conversation_as_markdown(
    with_smollm2: Settings, make_app: AppFactory, conversations: ConversationStore, tmp_path: Path
) -> None:
    conversation = conversations.create(title="Capitals", model="smollm2")
    conversations.add_message(conversation.id, "user", "Capital of France?")
    conversations.add_message(conversation.id, "assistant", "Paris.", model="smollm2")
    app = make_app(export_dir=tmp_path / "exports")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f8")
        await pilot.pause()
    files = list((tmp_path / "exports").glob("*.md"))
    assert [f.name for f in files] == [f"Capitals-{conversation.id}.md"]
    text = files[0].read_text()
    assert text.startswith("# Capitals")
    assert "Capital of France?" in text and "Paris." in text


async def test_settings_are_kept_per_conversation_and_used_for_the_reply(
    with_smollm2: Settings, make_app: AppFactory
) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await pilot.press("f2")
        await pilot.pause()
        await pilot.press(*"Answer in one word.")
        max_tokens = app.screen.query_one("#max-tokens")
        max_tokens.value = "3"  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert chat.conversation is not None
        settings = app.store.get(chat.conversation.id).settings
        assert (settings.system_prompt, settings.max_tokens) == ("Answer in one word.", 3)
        await pilot.press(*"Tell me about the moon.", "enter")
        await wait_for(lambda: len(chat.query(MessageView)) == 2)
        await wait_for(lambda: not chat.generating)
        reply = app.store.messages(chat.conversation.id)[-1]
        assert reply.state == "complete"
        assert 0 < len(reply.content.split()) <= 3
