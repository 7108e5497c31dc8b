"""The TUI's chat history: conversations and their messages in one SQLite file under the localinfer home.

Every public call takes a lock and commits before it returns, so Textual thread workers may share one store and a
killed app keeps everything written so far. A reply still ``streaming`` when the app died reads ``interrupted`` on
the next open, with its partial text kept.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from localinfer.app.tui.attachments import Attachment
from localinfer.errors import LocalInferError

MessageState = Literal["complete", "streaming", "stopped", "interrupted", "error"]
MESSAGE_STATES: tuple[MessageState, ...] = ("complete", "streaming", "stopped", "interrupted", "error")
ROLES = ("user", "assistant", "tool")  # a tool turn: one call a reply made, and its result
DEFAULT_TITLE = "New chat"
TITLE_LENGTH = 40
SCHEMA_VERSION = 3
_STATE_NOTES = {"stopped": "_The reply was stopped._", "interrupted": "_The app closed before this reply finished._"}

# The images attached to user messages, in order (their bytes: the files may move or go)
_ATTACHMENTS = """
CREATE TABLE attachments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    name TEXT NOT NULL, mime TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX attachments_by_message ON attachments(message_id, id)"""

_SCHEMA = (
    """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, model TEXT, settings TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL, content TEXT NOT NULL, state TEXT NOT NULL, model TEXT, created REAL NOT NULL,
    ttft_ms REAL, tokens_per_second REAL, error TEXT,
    reasoning TEXT NOT NULL DEFAULT '', thinking_ms REAL, thinking_tokens INTEGER, tool TEXT);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
CREATE INDEX conversations_by_updated ON conversations(updated);
"""
    + _ATTACHMENTS
)

# What each older schema version needs to become the current one.
_MIGRATIONS = {
    1: (
        "ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE messages ADD COLUMN thinking_ms REAL",
        "ALTER TABLE messages ADD COLUMN thinking_tokens INTEGER",
    ),
    2: ("ALTER TABLE messages ADD COLUMN tool TEXT", *_ATTACHMENTS.split(";")),
}


class ConversationStoreError(LocalInferError):
    """The history file cannot be used: not a database, or written by a newer localinfer."""


class ConversationNotFound(LocalInferError):
    """No conversation has this id (it may have been deleted)."""

    def __init__(self, conversation_id: int) -> None:
        super().__init__(f"conversation {conversation_id} not found", hint="it may have been deleted; pick another")
        self.conversation_id = conversation_id


class MessageNotFound(LocalInferError):
    """No message has this id (it was deleted, for example by a retry). Ids are never reused."""

    def __init__(self, message_id: int) -> None:
        super().__init__(f"message {message_id} not found", hint="it may have been deleted by a retry or an edit")
        self.message_id = message_id


class InvalidTitle(LocalInferError, ValueError):
    """A conversation title that is empty once whitespace is removed."""


@dataclass(frozen=True)
class ConversationSettings:
    """Per-conversation generation settings; ``None`` means the model's own limit (``think``: as the model's
    template has it, which for most reasoning models is on)."""

    system_prompt: str = ""
    temperature: float = 0.8
    top_p: float = 0.95
    max_tokens: int | None = None
    context_length: int | None = None
    think: bool | None = None  # a reasoning model thinks before it answers
    thinking_budget: int | None = None  # thinking tokens before the model is made to answer
    tools_off: tuple[str, ...] = ()  # MCP servers ("name") and tools ("server/tool") this chat does not offer
    tool_steps: int | None = None  # most rounds of tool calls in a reply (None: the tool_steps setting)
    auto_approve: tuple[str, ...] = ()  # tools ("server/tool") this chat runs without asking


@dataclass(frozen=True)
class Conversation:
    """One chat; ``created`` and ``updated`` are unix times."""

    id: int
    title: str
    model: str | None
    settings: ConversationSettings
    created: float
    updated: float


@dataclass(frozen=True)
class StoredMessage:
    """One message of a conversation, with the reply's timings once known. A reasoning model's reply keeps its
    thinking apart from ``content``: ``reasoning``, how long it thought (``thinking_ms``) and in how many tokens."""

    id: int
    conversation_id: int
    role: str
    content: str
    state: MessageState
    model: str | None
    created: float
    ttft_ms: float | None = None
    tokens_per_second: float | None = None
    error: str | None = None
    reasoning: str = ""
    thinking_ms: float | None = None
    thinking_tokens: int | None = None
    tool: str | None = None  # a tool turn's call and how it ended (the tool loop's ToolRecord as JSON)


_CONVERSATION_COLUMNS = "id, title, model, settings, created, updated"
_MESSAGE_COLUMNS = ", ".join(field.name for field in fields(StoredMessage))


def _clean_title(title: str) -> str:
    cleaned = " ".join(title.split())
    if not cleaned:
        raise InvalidTitle("a conversation title cannot be empty", hint="type at least one character")
    return cleaned


def _title_from(content: str) -> str | None:
    """The first non-blank line of ``content``, shortened to ``TITLE_LENGTH`` characters with an ellipsis."""
    line = next((" ".join(line.split()) for line in content.splitlines() if line.strip()), "")
    if not line:
        return None
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _load_settings(text: str) -> ConversationSettings:
    """Settings from their JSON column; keys this version does not know are ignored, missing ones default."""
    data = json.loads(text)
    if not isinstance(data, dict):
        return ConversationSettings()
    known = {field.name for field in fields(ConversationSettings)}
    values: dict[str, Any] = {
        key: tuple(value) if isinstance(value, list) else value for key, value in data.items() if key in known
    }
    return ConversationSettings(**values)


def _conversation(row: tuple[Any, ...]) -> Conversation:
    id_, title, model, settings, created, updated = row
    return Conversation(id_, title, model, _load_settings(settings), created, updated)


def _check_state(state: str) -> None:
    if state not in MESSAGE_STATES:
        raise ValueError(f"state must be one of {MESSAGE_STATES}, not {state!r}")


class ConversationStore:
    """Conversations and messages in the SQLite file ``path``; safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._last_time = 0.0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10.0)
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise ConversationStoreError(
                f"cannot read the chat history {path}: {exc}", hint="move the file aside to start a new history"
            ) from exc
        except BaseException:
            self._db.close()
            raise

    def _open(self) -> None:
        """Set the pragmas, create, check or upgrade the schema, and mark replies cut off by a killed app as
        interrupted.

        A second app on the same file marks the first one's live reply too; that reply's next update restores it.
        """
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
            self._db.execute(f"PRAGMA {pragma}")
        with self._transaction():
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ConversationStoreError(
                    f"the chat history {self.path} has schema version {version}, newer than {SCHEMA_VERSION}",
                    hint="upgrade localinfer, or move the file aside to start a new history",
                )
            if version == 0:
                for statement in _SCHEMA.split(";"):
                    self._db.execute(statement)
                version = SCHEMA_VERSION
            for older in range(version, SCHEMA_VERSION):
                for statement in _MIGRATIONS[older]:
                    self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute("UPDATE messages SET state = 'interrupted' WHERE state = 'streaming'")

    def close(self) -> None:
        """Close the file; later calls fail. Closing twice is fine."""
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """Hold the lock for one write transaction, committed on exit and rolled back on an exception."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _now(self) -> float:
        """Wall-clock time, strictly increasing within this store so ``updated`` never ties."""
        self._last_time = max(time.time(), self._last_time + 1e-6)
        return self._last_time

    def _get(self, conversation_id: int) -> Conversation:
        sql = f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE id = ?"
        row = self._db.execute(sql, (conversation_id,)).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return _conversation(row)

    def _get_message(self, message_id: int) -> StoredMessage:
        row = self._db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            raise MessageNotFound(message_id)
        return StoredMessage(*row)

    def _update(self, conversation_id: int, column: str, value: object) -> Conversation:
        with self._transaction():
            sql = f"UPDATE conversations SET {column} = ?, updated = ? WHERE id = ?"
            if self._db.execute(sql, (value, self._now(), conversation_id)).rowcount == 0:
                raise ConversationNotFound(conversation_id)
            return self._get(conversation_id)

    def list_conversations(self) -> list[Conversation]:
        """Every conversation, most recently updated first."""
        with self._lock:
            sql = f"SELECT {_CONVERSATION_COLUMNS} FROM conversations ORDER BY updated DESC, id DESC"
            return [_conversation(row) for row in self._db.execute(sql)]

    def create(
        self, *, title: str = DEFAULT_TITLE, model: str | None = None, settings: ConversationSettings | None = None
    ) -> Conversation:
        """A new, empty conversation; a blank title raises ``InvalidTitle``."""
        values = (_clean_title(title), model, json.dumps(asdict(settings or ConversationSettings())))
        with self._transaction():
            now = self._now()
            sql = "INSERT INTO conversations (title, model, settings, created, updated) VALUES (?, ?, ?, ?, ?)"
            conversation_id = self._db.execute(sql, (*values, now, now)).lastrowid
            assert conversation_id is not None
            return self._get(conversation_id)

    def get(self, conversation_id: int) -> Conversation:
        """The conversation ``conversation_id``; raises ``ConversationNotFound``."""
        with self._lock:
            return self._get(conversation_id)

    def rename(self, conversation_id: int, title: str) -> Conversation:
        """Set the title, whitespace collapsed; a blank title raises ``InvalidTitle`` (also a ``ValueError``)."""
        return self._update(conversation_id, "title", _clean_title(title))

    def delete(self, conversation_id: int) -> None:
        """Delete the conversation and its messages; a missing id is not an error."""
        with self._transaction():
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def set_model(self, conversation_id: int, model: str | None) -> Conversation:
        """Set the model new replies use."""
        return self._update(conversation_id, "model", model)

    def update_settings(self, conversation_id: int, settings: ConversationSettings) -> Conversation:
        """Replace the conversation's settings."""
        return self._update(conversation_id, "settings", json.dumps(asdict(settings)))

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        """The conversation's messages, oldest first; raises ``ConversationNotFound``."""
        with self._lock:
            self._get(conversation_id)
            sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY id"
            return [StoredMessage(*row) for row in self._db.execute(sql, (conversation_id,))]

    def attachments(self, conversation_id: int) -> dict[int, tuple[Attachment, ...]]:
        """The images attached to the conversation's messages, by message id, each message's in order."""
        found: dict[int, list[Attachment]] = {}
        with self._lock:
            sql = (
                "SELECT a.message_id, a.name, a.mime, a.data FROM attachments a JOIN messages m ON m.id = a.message_id"
                " WHERE m.conversation_id = ? ORDER BY a.message_id, a.id"
            )
            for message_id, name, mime, data in self._db.execute(sql, (conversation_id,)):
                found.setdefault(message_id, []).append(Attachment(name, mime, bytes(data)))
        return {message_id: tuple(images) for message_id, images in found.items()}

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        *,
        state: MessageState = "complete",
        model: str | None = None,
        attachments: tuple[Attachment, ...] = (),
        tool: str | None = None,
    ) -> StoredMessage:
        """Append a message (with the images ``attachments`` in order) and bump ``updated``. The first user message
        names a chat still called "New chat". A ``tool`` turn carries its call (``tool``) beside its result
        (``content``)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        _check_state(state)
        with self._transaction():
            title, now = self._get(conversation_id).title, self._now()
            if role == "user" and title == DEFAULT_TITLE:
                sql = "SELECT 1 FROM messages WHERE conversation_id = ? AND role = 'user' LIMIT 1"
                if self._db.execute(sql, (conversation_id,)).fetchone() is None:
                    title = _title_from(content) or title
            sql = (
                "INSERT INTO messages (conversation_id, role, content, state, model, created, tool)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)"
            )
            values = (conversation_id, role, content, state, model, now, tool)
            message_id = self._db.execute(sql, values).lastrowid
            sql = "INSERT INTO attachments (message_id, name, mime, data) VALUES (?, ?, ?, ?)"
            self._db.executemany(sql, [(message_id, a.name, a.mime, a.data) for a in attachments])
            sql = "UPDATE conversations SET title = ?, updated = ? WHERE id = ?"
            self._db.execute(sql, (title, now, conversation_id))
            assert message_id is not None
            return self._get_message(message_id)

    def update_message(
        self,
        message_id: int,
        *,
        content: str,
        state: MessageState,
        ttft_ms: float | None = None,
        tokens_per_second: float | None = None,
        error: str | None = None,
        reasoning: str | None = None,
        thinking_ms: float | None = None,
        thinking_tokens: int | None = None,
    ) -> StoredMessage:
        """Set a message's text and state in its own committed transaction; ``None`` keeps a stored timing, error
        or thinking.

        Raises ``MessageNotFound`` once the message is deleted (ids are never reused), so a stale stream stops.
        """
        _check_state(state)
        with self._transaction():
            sql = (
                "UPDATE messages SET content = ?, state = ?, ttft_ms = COALESCE(?, ttft_ms),"
                " tokens_per_second = COALESCE(?, tokens_per_second), error = COALESCE(?, error),"
                " reasoning = COALESCE(?, reasoning), thinking_ms = COALESCE(?, thinking_ms),"
                " thinking_tokens = COALESCE(?, thinking_tokens) WHERE id = ?"
            )
            values = (content, state, ttft_ms, tokens_per_second, error, reasoning, thinking_ms, thinking_tokens)
            if self._db.execute(sql, (*values, message_id)).rowcount == 0:
                raise MessageNotFound(message_id)
            return self._get_message(message_id)

    def delete_from(self, message_id: int) -> None:
        """Delete this message and every later one of its conversation (retry, edit); a missing id is not an error."""
        with self._transaction():
            row = self._db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is not None:
                sql = "DELETE FROM messages WHERE conversation_id = ? AND id >= ?"
                self._db.execute(sql, (row[0], message_id))
                self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (self._now(), row[0]))

    def export_markdown(self, conversation_id: int) -> str:
        """The conversation as Markdown: a title, a list of its facts, then one section per message (a reply's
        thinking in a ``<details>`` block before its answer)."""
        conversation, messages = self.get(conversation_id), self.messages(conversation_id)
        attached = self.attachments(conversation_id)
        created = datetime.fromtimestamp(conversation.created).strftime("%Y-%m-%d %H:%M")
        facts = [f"- Model: {conversation.model or 'none'}", f"- Created: {created}"]
        if system_prompt := conversation.settings.system_prompt.strip():
            facts.append("- System prompt: " + system_prompt.replace("\n", "\n  "))
        blocks = [f"# {conversation.title}", "\n".join(facts)]
        for message in messages:
            if message.role == "tool":
                blocks.append(_tool_markdown(message))
                continue
            if message.role == "user":
                blocks.append("## User")
            else:
                blocks.append(f"## Assistant ({message.model})" if message.model else "## Assistant")
                if message.reasoning.strip():  # collapsed where Markdown is shown, as the app shows it
                    blocks.append(f"<details><summary>Thinking</summary>\n\n{message.reasoning.strip()}\n\n</details>")
            if message.id in attached:
                blocks.append("_Attached: " + ", ".join(a.chip.removeprefix("🖼 ") for a in attached[message.id]) + "_")
            if message.content.strip():
                blocks.append(message.content.strip("\n"))
            if message.state in _STATE_NOTES:
                blocks.append(_STATE_NOTES[message.state])
            elif message.state == "error":
                blocks.append(f"_Error: {(message.error or 'unknown').strip()}_")
        return "\n\n".join(blocks) + "\n"


def _tool_markdown(message: StoredMessage) -> str:
    """A tool turn in the export: what was called, with what, how it ended, and its output folded."""
    call = json.loads(message.tool or "{}")
    name = f"{call.get('server', '')}/{call.get('tool', '')}".strip("/") or "tool"
    arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
    return (
        f"## Tool {name} ({call.get('status', 'ok')})\n\n`{arguments}`\n\n"
        f"<details><summary>Output</summary>\n\n```\n{message.content}\n```\n\n</details>"
    )
