"""Images in the app: ``/image PATH`` or a path pasted (dropped) into the prompt attaches an image, shown as a chip
with its size, and sent with the message as a media part behind a ``MEDIA_MARKER``; the conversation keeps it for
later turns; a model that does not see says so in one line; the models screen marks the models that see.

The client is scripted (it lists a model that sees and one that does not, and answers every chat with one fixed
reply, recording the request), so nothing depends on a CPU's greedy text: what is checked is what the app sends and
shows. That the engine takes such a request is the vision engine's tests'; the snapshots are at the end.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import pytest
from textual import events
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import DataTable

from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationStore
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.app.tui.screens.models import ModelsScreen
from localinfer.app.tui.widgets.message import MessageView
from localinfer.app.tui.widgets.prompt import PromptInput
from localinfer.client.base import ClientStatus, LoadedModelStatus
from localinfer.progress import ProgressEvent
from localinfer.types import MEDIA_MARKER, ChatRequest, MediaPart, ModelInfo, Timings, TokenChunk
from tests.app.tui.conftest import wait_for

SEES = "smolvlm"
BLIND = "smollm2"
REPLY = "A small red square."
STATUS = ClientStatus(
    where="in-process",
    loaded=(LoadedModelStatus(SEES, "llamacpp", 2048, 1, threads=2, size_bytes=98_000_000, expires_in=300.0),),
    memory_used=512_000_000,
    memory_total=24_000_000_000,
    memory_available=20_000_000_000,
)


def png(width: int, height: int) -> bytes:
    """A real PNG of one red colour (at most 64 KB of pixels: one stored block)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\0" + b"\xff\0\0" * width for _ in range(height))
    # one stored (uncompressed) deflate block: the same bytes with any zlib
    stored = b"\x78\x01\x01" + struct.pack("<HH", len(rows), len(rows) ^ 0xFFFF) + rows
    idat = stored + struct.pack(">I", zlib.adler32(rows))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


class ScriptedClient:
    """Two models, one that sees; every chat answered with ``REPLY``; the requests kept."""

    where = "in-process"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> AsyncGenerator[TokenChunk, None]:
        self.requests.append(request)
        yield TokenChunk(REPLY)
        yield TokenChunk(
            "", finish_reason="stop", timings=Timings(prompt_ms=20.0, predicted_ms=100.0, prompt_n=12, predicted_n=10)
        )

    async def models(self) -> list[ModelInfo]:
        return [
            ModelInfo(SEES, "/m/smolvlm.gguf", 180_000_000, "Q8_0", loaded=True, context_length=2048,
                      projector="/m/mmproj-smolvlm.gguf", modalities=("vision",)),
            ModelInfo(BLIND, "/m/smollm2.gguf", 98_000_000, "Q4_1", context_length=8192),
        ]  # fmt: skip

    async def load(self, model: str, *, context_length: int | None = None) -> None:
        return None

    async def pull(self, ref: str) -> AsyncGenerator[ProgressEvent, None]:
        yield ProgressEvent("success")

    async def remove(self, model: str) -> int:
        return 0

    async def status(self) -> ClientStatus:
        return STATUS

    async def close(self) -> None:
        return None


RED = png(16, 16)


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "red square.png"
    path.write_bytes(RED)
    return path


@pytest.fixture
def make(tmp_path: Path) -> Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]]:
    def factory(model: str = SEES) -> tuple[LocalInferApp, ScriptedClient, list[str]]:
        store = ConversationStore(tmp_path / "conversations.sqlite3")
        if not store.list_conversations():
            store.create(model=model)
        client = ScriptedClient()
        ticks = itertools.count()
        app = LocalInferApp(
            client,
            store,
            default_model=model,
            export_dir=tmp_path / "exports",
            poll_status=False,
            clock=lambda: next(ticks) * 0.05,  # 50 ms a read: the reply's first token is the same every run
        )
        said: list[str] = []
        notify = app.notify

        def recorded(message: str, **kwargs: Any) -> None:
            said.append(message)
            notify(message, **kwargs)

        app.notify = recorded  # type: ignore[method-assign]
        return app, client, said

    return factory


async def type_and_send(pilot: Pilot[None], text: str) -> None:
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.text = text
    prompt.focus()
    await pilot.press("enter")
    await pilot.pause()


def chat_of(app: App[Any]) -> ChatScreen:
    screen = app.screen
    assert isinstance(screen, ChatScreen)
    return screen


async def test_an_image_attached_with_the_command_goes_with_the_message_behind_a_marker(
    make: Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]], image: Path
) -> None:
    app, client, said = make()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = chat_of(app)
        await type_and_send(pilot, f'/image "{image}"')
        assert [a.name for a in chat.attached] == ["red square.png"]
        assert str(chat.query_one("#attachments").render()) == chat_chip(image) == f"🖼 red square.png · {len(RED)} B"
        await type_and_send(pilot, "What is in this picture?")
        await wait_for(lambda: len(client.requests) == 1 and not chat.generating, what="the reply")
        (question,) = [m for m in client.requests[0].messages if m.role == "user"]
        assert question.content == MEDIA_MARKER + "What is in this picture?"
        assert question.media == (MediaPart("image", RED, "image/png"),)
        assert chat.attached == [] and not chat.query_one("#attachments").display
        sent = chat.query(MessageView).first()
        assert sent.chips == (chat_chip(image),)
        assert said == []


def chat_chip(image: Path) -> str:
    from localinfer.app.tui.attachments import read_attachment

    return read_attachment(image).chip


async def test_the_image_stays_with_its_message_in_later_turns_and_after_a_reopen(
    make: Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]], image: Path
) -> None:
    app, client, _ = make()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = chat_of(app)
        await type_and_send(pilot, f"/image {image}")
        await type_and_send(pilot, "What is this?")
        await wait_for(lambda: len(client.requests) == 1 and not chat.generating, what="the first reply")
        await type_and_send(pilot, "And its colour?")
        await wait_for(lambda: len(client.requests) == 2 and not chat.generating, what="the second reply")
    first, reply, second = [m for m in client.requests[1].messages if m.role != "system"]
    assert (first.content, len(first.media)) == (MEDIA_MARKER + "What is this?", 1)
    assert (reply.content, reply.media) == (REPLY, ())
    assert (second.content, second.media) == ("And its colour?", ())
    app, _, _ = make()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        views = list(chat_of(app).query(MessageView))
        assert views[0].chips == (chat_chip(image),) and views[2].chips == ()


async def test_a_pasted_or_dropped_path_attaches_the_image_and_other_text_is_typed(
    make: Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]], image: Path
) -> None:
    app, _, _ = make()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = chat_of(app)
        prompt = chat.query_one(PromptInput)
        prompt.focus()
        escaped = str(image).replace(" ", "\\ ")  # as a terminal types a dropped file
        app.post_message(events.Paste(escaped))
        await pilot.pause()
        assert [a.name for a in chat.attached] == ["red square.png"] and prompt.text == ""
        app.post_message(events.Paste(f"file://{str(image).replace(' ', '%20')}"))
        await pilot.pause()
        assert len(chat.attached) == 2
        app.post_message(events.Paste("just some text"))
        await pilot.pause()
        assert prompt.text == "just some text" and len(chat.attached) == 2
        await type_and_send(pilot, "/image")
        assert chat.attached == []


async def test_a_model_that_does_not_see_says_so_in_one_line_and_nothing_is_attached(
    make: Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]], image: Path
) -> None:
    app, client, said = make(model=BLIND)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = chat_of(app)
        await type_and_send(pilot, f"/image {image}")
        assert chat.attached == []
        (line,) = said
        assert line.startswith(f"{BLIND} does not see images") and "\n" not in line
        assert client.requests == []


async def test_what_is_not_an_image_is_not_attached_and_says_why(
    make: Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a picture")
    app, _, said = make()
    async with app.run_test(size=(100, 30)) as pilot:
        chat = chat_of(app)
        await type_and_send(pilot, f"/image {notes}")
        await type_and_send(pilot, f"/image {tmp_path / 'gone.png'}")
        assert chat.attached == []
        assert said[0].startswith("notes.txt is not an image") and said[1].startswith("there is no file at")


async def test_the_models_screen_marks_the_models_that_see(
    make: Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]],
) -> None:
    app, _, _ = make()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("ctrl+o")
        screen = app.screen
        assert isinstance(screen, ModelsScreen)
        await wait_for(lambda: len(screen.models) == 2, what="the models")
        table: DataTable[str] = screen.query_one("#models-table", DataTable)
        rows = {table.get_row_at(i)[0]: table.get_row_at(i)[4] for i in range(2)}
        assert rows == {SEES: "image", BLIND: ""}


# -- snapshots (update after a deliberate change with ``pytest tests/app/tui --snapshot-update``) ------------------


async def attached(pilot: Pilot[None], image: Path) -> None:
    chat = chat_of(pilot.app)
    await chat.attach(image)
    prompt = chat.query_one(PromptInput)
    prompt.text = "What is in this picture?"
    prompt.cursor_blink = False
    await pilot.pause()


def test_a_chip_over_the_prompt(
    snap_compare: Any, make: Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]], image: Path
) -> None:
    app, _, _ = make()
    assert snap_compare(app, terminal_size=(80, 24), run_before=lambda pilot: attached(pilot, image))


def test_a_sent_image_in_the_conversation(
    snap_compare: Any, make: Callable[..., tuple[LocalInferApp, ScriptedClient, list[str]]], image: Path
) -> None:
    async def sent(pilot: Pilot[None]) -> None:
        await attached(pilot, image)
        await pilot.press("enter")
        chat = chat_of(pilot.app)
        await wait_for(lambda: not chat.generating and len(chat.query(MessageView)) == 2, what="the reply")
        chat.query_one(PromptInput).cursor_blink = False
        await pilot.pause()

    app, _, _ = make()
    assert snap_compare(app, terminal_size=(80, 24), run_before=sent)
