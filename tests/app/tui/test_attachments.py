"""Attachments: what a path or a paste names, what counts as an image, and how the chat history keeps them."""

from __future__ import annotations

from pathlib import Path

import pytest

from localinfer.app.tui.attachments import (
    MAX_IMAGE_BYTES,
    Attachment,
    AttachmentError,
    image_command,
    image_mime,
    pasted_path,
    read_attachment,
    with_markers,
)
from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.app.tui.replies import chat_request
from localinfer.types import MEDIA_MARKER, MediaPart

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


@pytest.mark.parametrize(
    ("head", "mime"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0" + b"\0" * 8, "image/jpeg"),
        (b"GIF89a" + b"\0" * 8, "image/gif"),
        (b"RIFF\0\0\0\0WEBPVP8 ", "image/webp"),
        (b"BM" + b"\0" * 8, "image/bmp"),
        (b"%PDF-1.7", None),
        (b"", None),
    ],
)
def test_an_image_is_told_by_its_first_bytes(head: bytes, mime: str | None) -> None:
    assert image_mime(head) == mime


def test_a_pasted_path_to_an_image_is_one_and_other_text_is_not(tmp_path: Path) -> None:
    image = tmp_path / "my cat.png"
    image.write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("hello")
    assert pasted_path(str(image).replace(" ", "\\ ")) == image
    assert pasted_path(f"'{image}'\n") == image
    assert pasted_path(f"file://{str(image).replace(' ', '%20')}") == image
    assert pasted_path(str(tmp_path / "notes.txt")) is None
    assert pasted_path("my cat.png") is None  # not a path a terminal types for a dropped file
    assert pasted_path(f"{image}\n{image}") is None
    assert pasted_path("What is in this picture?") is None


def test_the_image_command_takes_one_path_quoted_or_not() -> None:
    assert image_command("/image ~/Pictures/cat.png") == "~/Pictures/cat.png"
    assert image_command('/image "/tmp/my cat.png"') == "/tmp/my cat.png"
    assert image_command("/image") == ""
    assert image_command("/images are nice") is None
    assert image_command("what is /image for?") is None


def test_what_cannot_be_attached_says_why(tmp_path: Path) -> None:
    with pytest.raises(AttachmentError, match="there is no file"):
        read_attachment(tmp_path / "gone.png")
    (tmp_path / "a.txt").write_text("text")
    with pytest.raises(AttachmentError, match=r"a\.txt is not an image"):
        read_attachment(tmp_path / "a.txt")
    big = tmp_path / "big.png"
    big.write_bytes(PNG + b"\0" * MAX_IMAGE_BYTES)
    with pytest.raises(AttachmentError, match=r"big\.png is 21\.0 MB"):
        read_attachment(big)
    with pytest.raises(AttachmentError, match="is not a file"):
        read_attachment(tmp_path)


def test_the_history_keeps_a_messages_images_in_order_and_sends_them_behind_markers(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    try:
        chat = store.create(model="m")
        one, two = Attachment("a.png", "image/png", PNG + b"1"), Attachment("b.png", "image/png", PNG + b"2")
        asked = store.add_message(chat.id, "user", "Which is larger?", attachments=(one, two))
        store.add_message(chat.id, "assistant", "The second.", model="m")
        assert store.attachments(chat.id) == {asked.id: (one, two)}
        request = chat_request("m", ConversationSettings(), store.messages(chat.id), store.attachments(chat.id))
        question, answer = request.messages
        assert question.content == MEDIA_MARKER * 2 + "Which is larger?" == with_markers("Which is larger?", (one, two))
        assert question.media == (MediaPart("image", one.data, "image/png"), MediaPart("image", two.data, "image/png"))
        assert answer.media == ()
        assert "_Attached: a.png · 41 B, b.png · 41 B_" in store.export_markdown(chat.id)
        store.delete_from(asked.id)  # a retry or an edit drops the images with their message
        assert store.attachments(chat.id) == {}
    finally:
        store.close()
