"""The TUI's chat history: real SQLite files in ``tmp_path``, reopened the way the app reopens them."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from localinfer.app.tui.conversations import (
    SCHEMA_VERSION,
    ConversationNotFound,
    ConversationSettings,
    ConversationStore,
    ConversationStoreError,
    InvalidTitle,
    MessageNotFound,
)
from localinfer.errors import LocalInferError


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """Where the history lives, in a home folder that does not exist yet."""
    return tmp_path / "home" / "conversations.sqlite3"


@pytest.fixture
def store(path: Path) -> Iterator[ConversationStore]:
    store = ConversationStore(path)
    yield store
    store.close()


def reopen(store: ConversationStore) -> ConversationStore:
    store.close()
    return ConversationStore(store.path)


def raw(path: Path, sql: str) -> list[tuple[object, ...]]:
    """Rows straight from the file, through a connection of the test's own."""
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_create_makes_the_home_folder_and_a_new_chat_with_defaults(path: Path, store: ConversationStore) -> None:
    conversation = store.create()
    assert path.is_file()
    assert conversation.title == "New chat"
    assert conversation.model is None
    assert conversation.settings == ConversationSettings()
    assert conversation.created == conversation.updated
    assert store.get(conversation.id) == conversation
    assert store.messages(conversation.id) == []


def test_list_conversations_puts_the_most_recently_updated_first(store: ConversationStore) -> None:
    first = store.create(title="first")
    second = store.create(title="second")
    assert [c.title for c in store.list_conversations()] == ["second", "first"]
    store.add_message(first.id, "user", "hello")
    assert [c.title for c in store.list_conversations()] == ["first", "second"]
    store.rename(second.id, "second, renamed")
    assert [c.title for c in store.list_conversations()] == ["second, renamed", "first"]


def test_rename_strips_the_title_and_keeps_it_after_reopening(store: ConversationStore) -> None:
    conversation = store.create()
    renamed = store.rename(conversation.id, "  Trip\n to   Lisbon \t")
    assert renamed.title == "Trip to Lisbon"
    assert renamed.updated > conversation.updated
    store = reopen(store)
    try:
        assert store.get(conversation.id).title == "Trip to Lisbon"
    finally:
        store.close()


def test_rename_to_a_blank_title_raises_invalid_title_and_changes_nothing(store: ConversationStore) -> None:
    conversation = store.create(title="kept")
    with pytest.raises(InvalidTitle) as caught:
        store.rename(conversation.id, " \n ")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, LocalInferError)
    assert store.get(conversation.id) == conversation
    with pytest.raises(InvalidTitle):
        store.create(title="")


def test_delete_removes_the_conversation_and_cascades_to_its_messages_only(
    path: Path, store: ConversationStore
) -> None:
    doomed = store.create()
    kept = store.create()
    for conversation in (doomed, kept):
        store.add_message(conversation.id, "user", "hi")
        store.add_message(conversation.id, "assistant", "hello")
    store.delete(doomed.id)
    assert [c.id for c in store.list_conversations()] == [kept.id]
    assert raw(path, f"SELECT count(*) FROM messages WHERE conversation_id = {doomed.id}") == [(0,)]
    assert len(store.messages(kept.id)) == 2
    store.delete(doomed.id)  # deleting twice is not an error


def test_get_of_a_missing_id_raises_conversation_not_found(store: ConversationStore) -> None:
    with pytest.raises(ConversationNotFound) as caught:
        store.get(42)
    assert isinstance(caught.value, LocalInferError)
    assert caught.value.conversation_id == 42
    assert caught.value.message == "conversation 42 not found"
    assert caught.value.hint
    conversation = store.create()
    store.delete(conversation.id)
    for call in (
        lambda: store.messages(conversation.id),
        lambda: store.rename(conversation.id, "x"),
        lambda: store.set_model(conversation.id, "m"),
        lambda: store.add_message(conversation.id, "user", "hi"),
    ):
        with pytest.raises(ConversationNotFound):
            call()


def test_settings_and_model_round_trip_through_the_file(store: ConversationStore) -> None:
    settings = ConversationSettings(
        system_prompt="Be brief.\nAnswer in French.", temperature=0.2, top_p=0.5, max_tokens=256, context_length=4096
    )
    conversation = store.create(model="smollm2", settings=settings)
    store = reopen(store)
    try:
        assert store.get(conversation.id).settings == settings
        assert store.get(conversation.id).model == "smollm2"
        updated = store.update_settings(conversation.id, ConversationSettings(temperature=1.0))
        assert updated.settings == ConversationSettings(temperature=1.0)
        assert store.set_model(conversation.id, None).model is None
    finally:
        store.close()
    store = ConversationStore(store.path)
    try:
        assert store.get(conversation.id).settings == ConversationSettings(temperature=1.0)
        assert store.get(conversation.id).model is None
    finally:
        store.close()


def test_settings_keys_unknown_to_this_version_are_ignored(path: Path, store: ConversationStore) -> None:
    conversation = store.create()
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE conversations SET settings = ?", ('{"temperature": 0.1, "min_p": 0.05}',))
    db.commit()
    db.close()
    store = ConversationStore(path)
    try:
        assert store.get(conversation.id).settings == ConversationSettings(temperature=0.1)
    finally:
        store.close()


def test_first_user_message_titles_a_new_chat_with_its_first_line(store: ConversationStore) -> None:
    conversation = store.create()
    store.add_message(conversation.id, "assistant", "An assistant message does not name the chat")
    store.add_message(conversation.id, "user", "\n  What is   WAL?  \nIn SQLite, I mean.")
    assert store.get(conversation.id).title == "What is WAL?"
    store.add_message(conversation.id, "user", "A second user message does not rename it")
    assert store.get(conversation.id).title == "What is WAL?"


def test_a_long_first_line_is_shortened_to_40_characters_with_an_ellipsis(store: ConversationStore) -> None:
    conversation = store.create()
    store.add_message(conversation.id, "user", "Explain the difference between a list and a tuple in Python\nplease")
    title = store.get(conversation.id).title
    assert title == "Explain the difference between a list a…"
    assert len(title) == 40


def test_a_chat_with_its_own_title_keeps_it(store: ConversationStore) -> None:
    conversation = store.create(title="Recipes")
    store.add_message(conversation.id, "user", "Pancakes?")
    assert store.get(conversation.id).title == "Recipes"


def test_add_message_bumps_updated_and_rejects_unknown_roles(store: ConversationStore) -> None:
    conversation = store.create()
    message = store.add_message(conversation.id, "user", "hi")
    assert store.get(conversation.id).updated == message.created > conversation.updated
    with pytest.raises(ValueError, match="role"):
        store.add_message(conversation.id, "system", "no")
    assert store.messages(conversation.id) == [message]


def test_update_message_persists_across_close_and_reopen(store: ConversationStore) -> None:
    conversation = store.create()
    store.add_message(conversation.id, "user", "Count to three")
    reply = store.add_message(conversation.id, "assistant", "", state="streaming", model="smollm2")
    store.update_message(reply.id, content="One", state="streaming", ttft_ms=31.5)
    store.update_message(reply.id, content="One, two", state="streaming")
    final = store.update_message(reply.id, content="One, two, three.", state="complete", tokens_per_second=88.0)
    assert (final.content, final.state, final.ttft_ms, final.tokens_per_second) == (
        "One, two, three.",
        "complete",
        31.5,  # a later update without ttft_ms keeps it
        88.0,
    )
    store = reopen(store)
    try:
        assert store.messages(conversation.id)[-1] == final
    finally:
        store.close()


SCRIPT = """
import sys, time
from pathlib import Path
from localinfer.app.tui.conversations import ConversationStore

store = ConversationStore(Path(sys.argv[1]))
conversation = store.create(model="smollm2")
store.add_message(conversation.id, "user", "Tell me a story")
reply = store.add_message(conversation.id, "assistant", "", state="streaming", model="smollm2")
store.update_message(reply.id, content="Once upon", state="streaming", ttft_ms=12.5)
store.update_message(reply.id, content="Once upon a time", state="streaming")
print(conversation.id, reply.id, flush=True)
time.sleep(60)
"""


def test_a_streaming_reply_of_a_killed_app_reopens_as_interrupted_with_its_partial_text(path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        conversation_id, reply_id = map(int, process.stdout.readline().split())
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    assert raw(path, f"SELECT state, content FROM messages WHERE id = {reply_id}") == [
        ("streaming", "Once upon a time")
    ]
    store = ConversationStore(path)
    try:
        reply = store.messages(conversation_id)[-1]
        assert (reply.id, reply.state, reply.content, reply.ttft_ms) == (
            reply_id,
            "interrupted",
            "Once upon a time",
            12.5,
        )
    finally:
        store.close()


def test_a_streaming_reply_left_by_an_unclosed_store_reopens_as_interrupted(path: Path) -> None:
    crashed = ConversationStore(path)
    conversation = crashed.create()
    reply = crashed.add_message(conversation.id, "assistant", "Partial", state="streaming")
    store = ConversationStore(path)
    try:
        assert store.messages(conversation.id)[-1].state == "interrupted"
        assert store.messages(conversation.id)[-1].content == "Partial"
    finally:
        store.close()
        crashed.close()
    assert reply.state == "streaming"


def test_delete_from_removes_that_message_and_later_ones_only(store: ConversationStore) -> None:
    conversation = store.create()
    other = store.create()
    user1 = store.add_message(conversation.id, "user", "one")
    reply1 = store.add_message(conversation.id, "assistant", "reply one")
    other_message = store.add_message(other.id, "user", "elsewhere")
    user2 = store.add_message(conversation.id, "user", "two")
    reply2 = store.add_message(conversation.id, "assistant", "reply two")
    store.delete_from(user2.id)
    assert store.messages(conversation.id) == [user1, reply1]
    assert store.messages(other.id) == [other_message]
    with pytest.raises(MessageNotFound):  # a stale stream cannot write into a later message: ids are not reused
        store.update_message(reply2.id, content="late token", state="streaming")
    assert store.add_message(conversation.id, "user", "three").id > reply2.id
    store.delete_from(reply2.id)  # a missing id is not an error


def test_export_markdown_has_the_title_facts_both_roles_and_the_reply_states(store: ConversationStore) -> None:
    settings = ConversationSettings(system_prompt="Be brief.\nUse metric units.")
    conversation = store.create(model="smollm2", settings=settings)
    store.add_message(conversation.id, "user", "How tall is Everest?")
    store.add_message(conversation.id, "assistant", "About 8849 m.", model="smollm2")
    store.add_message(conversation.id, "user", "And K2?")
    stopped = store.add_message(conversation.id, "assistant", "", state="streaming", model="smollm2")
    store.update_message(stopped.id, content="K2 is", state="stopped")
    store.add_message(conversation.id, "user", "Again?")
    store.add_message(conversation.id, "assistant", "K2 is 86", state="interrupted", model="gemma3")
    failed = store.add_message(conversation.id, "assistant", "", state="streaming", model="gemma3")
    store.update_message(failed.id, content="", state="error", error="llama_decode returned -1")
    created = datetime.fromtimestamp(conversation.created).strftime("%Y-%m-%d %H:%M")
    assert store.export_markdown(conversation.id) == (
        "# How tall is Everest?\n\n"
        f"- Model: smollm2\n- Created: {created}\n- System prompt: Be brief.\n  Use metric units.\n\n"
        "## User\n\nHow tall is Everest?\n\n"
        "## Assistant (smollm2)\n\nAbout 8849 m.\n\n"
        "## User\n\nAnd K2?\n\n"
        "## Assistant (smollm2)\n\nK2 is\n\n_The reply was stopped._\n\n"
        "## User\n\nAgain?\n\n"
        "## Assistant (gemma3)\n\nK2 is 86\n\n_The app closed before this reply finished._\n\n"
        "## Assistant (gemma3)\n\n_Error: llama_decode returned -1_\n"
    )


def test_export_markdown_of_an_empty_chat_says_no_model_and_leaves_out_the_system_prompt(
    store: ConversationStore,
) -> None:
    conversation = store.create(title="Empty")
    markdown = store.export_markdown(conversation.id)
    assert markdown.startswith("# Empty\n\n- Model: none\n- Created: ")
    assert "System prompt" not in markdown
    assert "##" not in markdown


def test_the_schema_version_is_set_and_the_journal_is_wal(path: Path, store: ConversationStore) -> None:
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION >= 1
    assert raw(path, "PRAGMA journal_mode") == [("wal",)]


def test_a_history_from_a_newer_localinfer_is_refused(path: Path) -> None:
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(ConversationStoreError, match="schema version") as caught:
        ConversationStore(path)
    assert "upgrade localinfer" in caught.value.hint


def test_a_file_that_is_not_a_database_raises_conversation_store_error(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database at all, just some text long enough to have a header" * 20)
    with pytest.raises(ConversationStoreError, match="cannot read the chat history") as caught:
        ConversationStore(path)
    assert caught.value.hint


def test_threads_can_share_one_store(store: ConversationStore) -> None:
    conversation = store.create()

    def write(n: int) -> None:
        for i in range(25):
            message = store.add_message(conversation.id, "assistant", "", state="streaming")
            store.update_message(message.id, content=f"{n}-{i}", state="complete")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    messages = store.messages(conversation.id)
    assert len({m.id for m in messages}) == 100
    assert {m.content for m in messages} == {f"{n}-{i}" for n in range(4) for i in range(25)}
    assert all(m.state == "complete" for m in messages)


def test_a_replys_thinking_is_kept_apart_from_its_answer_across_close_and_reopen(store: ConversationStore) -> None:
    conversation = store.create(settings=ConversationSettings(think=False, thinking_budget=64))
    reply = store.add_message(conversation.id, "assistant", "", state="streaming", model="qwen3")
    store.update_message(reply.id, content="", state="streaming", reasoning="The user asks")
    store.update_message(reply.id, content="Paris.", state="streaming")
    final = store.update_message(
        reply.id,
        content="Paris.",
        state="complete",
        reasoning="The user asks. France.",
        thinking_ms=820.0,
        thinking_tokens=9,
    )
    assert (final.content, final.reasoning, final.thinking_ms, final.thinking_tokens) == (
        "Paris.",
        "The user asks. France.",
        820.0,
        9,
    )
    store = reopen(store)
    try:
        assert store.messages(conversation.id) == [final]
        assert store.get(conversation.id).settings == ConversationSettings(think=False, thinking_budget=64)
    finally:
        store.close()


def test_a_history_of_schema_1_is_upgraded_and_its_messages_have_no_thinking(path: Path) -> None:
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, model TEXT, settings TEXT NOT NULL,
            created REAL NOT NULL, updated REAL NOT NULL);
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL, content TEXT NOT NULL, state TEXT NOT NULL, model TEXT, created REAL NOT NULL,
            ttft_ms REAL, tokens_per_second REAL, error TEXT);
        INSERT INTO conversations VALUES (1, 'Old', 'smollm2', '{"temperature": 0.5}', 1.0, 2.0);
        INSERT INTO messages VALUES (1, 1, 'assistant', 'Hello.', 'complete', 'smollm2', 2.0, 30.0, 90.0, NULL);
        PRAGMA user_version=1;
        """
    )
    db.close()
    store = ConversationStore(path)
    try:
        [message] = store.messages(1)
        assert (message.content, message.ttft_ms) == ("Hello.", 30.0)
        assert (message.reasoning, message.thinking_ms, message.thinking_tokens) == ("", None, None)
        assert store.get(1).settings == ConversationSettings(temperature=0.5)
    finally:
        store.close()
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


def test_export_markdown_puts_a_replys_thinking_in_a_details_block_before_its_answer(store: ConversationStore) -> None:
    conversation = store.create(title="Capital")
    reply = store.add_message(conversation.id, "assistant", "", state="streaming", model="qwen3")
    store.update_message(reply.id, content="\n\nParis.", state="complete", reasoning="\nFrance's capital.\n")
    assert store.export_markdown(conversation.id).endswith(
        "## Assistant (qwen3)\n\n<details><summary>Thinking</summary>\n\nFrance's capital.\n\n</details>\n\nParis.\n"
    )
