"""Images attached to a chat message: read from a path (``/image PATH``, or a path pasted or dropped into the
prompt), told apart from other files by their first bytes, shown as a chip with their size, and sent as the
message's media parts, each standing for one ``MEDIA_MARKER`` before its text (where Ollama puts a message's
``images``)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from localinfer.errors import LocalInferError
from localinfer.types import MEDIA_MARKER, MediaPart

MAX_IMAGE_BYTES = 20 * 1024 * 1024  # the largest image the app attaches (a server's body limit is near)
IMAGE_COMMAND = "/image"
# What an image file starts with, and its MIME type: the formats llama.cpp's mtmd decodes (stb_image)
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


class AttachmentError(LocalInferError):
    """A file that cannot be attached: missing, unreadable, too large, or not an image."""


@dataclass(frozen=True)
class Attachment:
    """An image attached to a message: the file's name, its MIME type and bytes."""

    name: str
    mime: str
    data: bytes = field(repr=False)

    @property
    def chip(self) -> str:
        """How the app shows it: ``🖼 cat.png · 120 KB``."""
        return f"🖼 {self.name} · {size_text(len(self.data))}"

    def part(self) -> MediaPart:
        return MediaPart("image", self.data, self.mime)


def size_text(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB"
    return f"{max(n, 1_000) // 1_000} KB" if n >= 1_000 else f"{n} B"


def image_mime(data: bytes) -> str | None:
    """The MIME type of an image by its first bytes (PNG, JPEG, GIF, BMP, WebP), None for anything else."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in _MAGIC if data.startswith(magic)), None)


def read_attachment(path: Path) -> Attachment:
    """The image at ``path``. Raises AttachmentError, naming the file and what is wrong with it."""
    path = path.expanduser()
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise AttachmentError(f"{path} is not a file", hint="attach an image file: /image PATH")
        if size > MAX_IMAGE_BYTES:
            raise AttachmentError(
                f"{path.name} is {size_text(size)}, more than the {size_text(MAX_IMAGE_BYTES)} an image may be",
                hint="attach a smaller copy of it",
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise AttachmentError(f"there is no file at {path}", hint="check the path: /image PATH") from None
    except OSError as exc:
        raise AttachmentError(f"cannot read {path}: {exc.strerror}", hint="check the file's permissions") from exc
    mime = image_mime(data)
    if mime is None:
        raise AttachmentError(
            f"{path.name} is not an image", hint="attach a PNG, JPEG, GIF, BMP or WebP file: /image PATH"
        )
    return Attachment(path.name, mime, data)


def pasted_path(text: str) -> Path | None:
    """The file a paste names, when it is one path to an existing image-like file (what a terminal types when a file
    is dropped on it: the path, maybe quoted or escaped, or a ``file://`` URL); None for any other text."""
    text = text.strip()
    if not text or "\n" in text:
        return None
    if text.startswith("file://"):
        text = unquote(urlsplit(text).path)
    else:
        try:
            words = shlex.split(text)
        except ValueError:
            return None
        if len(words) != 1:
            return None
        text = words[0]
    path = Path(text).expanduser()
    try:
        if not path.is_absolute() or not path.is_file():
            return None
        with path.open("rb") as fh:
            return path if image_mime(fh.read(16)) is not None else None
    except OSError:
        return None


def image_command(text: str) -> str | None:
    """The argument of a ``/image`` command typed as the message (``""`` for a bare ``/image``), else None."""
    stripped = text.strip()
    if stripped == IMAGE_COMMAND:
        return ""
    if stripped.startswith(IMAGE_COMMAND + " "):
        argument = stripped[len(IMAGE_COMMAND) + 1 :].strip()
        try:
            words = shlex.split(argument)
        except ValueError:
            return argument
        return words[0] if len(words) == 1 else argument
    return None


def with_markers(text: str, attachments: tuple[Attachment, ...]) -> str:
    """A message's text as the model is sent it: one ``MEDIA_MARKER`` per image, before the text."""
    return MEDIA_MARKER * len(attachments) + text
