"""The one reader of images and sounds in requests, for every dialect: base64, ``data:`` URIs and (when the server
allows it) http(s) URLs become ``MediaPart``s, checked before anything decodes them.

What is checked, each a 400 in the route's dialect naming the part: base64 that does not decode; bytes that are not
an image (PNG, JPEG, GIF, BMP) or a sound (WAV, MP3, FLAC), whatever MIME type the client named, since the kind is
sniffed from the bytes; an image larger than ``max_image_pixels``, read from its header before any pixel is decoded
(a 20,000 x 20,000 PNG of a few kilobytes would take 1.2 GB decoded); more than ``max_media`` parts in one request;
an http(s) URL unless ``--allow-image-urls`` is given, and then one that does not answer 200 with at most
``media_url_max_bytes`` within ``media_url_timeout``. A body over ``--max-body`` never gets here (413: limits.py).

URLs are fetched before the body's wire model is built (``prefetch``, from the route class), so that translating a
wire model to the core stays synchronous; the limits are set once per request's task (``use_media_limits``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import struct
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from localinfer.errors import InvalidRequest
from localinfer.types import MEDIA_MARKER, MediaKind, MediaPart

IMAGE_KINDS: Final = "PNG, JPEG, GIF or BMP"


@dataclass(frozen=True)
class MediaLimits:
    """The server's limits on media (settings: allow_image_urls, media_url_max_bytes, media_url_timeout,
    max_media, max_image_pixels)."""

    allow_urls: bool = False
    url_max_bytes: int = 20 * 1024 * 1024
    url_timeout: float = 10.0
    max_parts: int = 32
    max_pixels: int = 8192 * 8192


@dataclass
class _RequestMedia:
    limits: MediaLimits
    fetched: dict[str, bytes] = field(default_factory=dict)
    parts: int = 0


_current: ContextVar[_RequestMedia | None] = ContextVar("localinfer_request_media", default=None)


def _bad(message: str, *, param: str, hint: str | None = None) -> InvalidRequest:
    """A refusal naming the part in its message too: Ollama's errors are a message alone."""
    return InvalidRequest(f"{param}: {message}", param=param, hint=hint)


def use_media_limits(limits: MediaLimits) -> None:
    """Read the rest of this request's task's media within ``limits``."""
    _current.set(_RequestMedia(limits))


def _state() -> _RequestMedia:
    state = _current.get()
    if state is None:
        state = _RequestMedia(MediaLimits())
        _current.set(state)
    return state


def media_part(source: str, *, param: str, kind: MediaKind | None = None) -> MediaPart:
    """The image or sound ``source`` names: a ``data:`` URI, an http(s) URL (fetched by ``prefetch``) or bare
    base64 (as llama-server reads an ``image_url``'s url). ``kind``: what the part must be (None: either). Raises
    InvalidRequest naming ``param``."""
    if source.startswith(("http://", "https://")):
        return media_bytes(_fetched(source, param), param=param, kind=kind)
    if source.startswith("file:"):
        raise _bad("file: URLs are not read by this server", param=param, hint=_SEND_AS)
    if source.startswith("data:"):
        header, comma, payload = source.partition(",")
        if not comma or not header.endswith(";base64"):
            raise _bad("a data: URI must be base64-encoded (data:image/png;base64,...)", param=param, hint=_SEND_AS)
        named = header[5:].split(";", 1)[0].lower()
        if not named.startswith(("image/", "audio/")):
            raise _bad(f"the data: URI's type {named or '(none)'} is not an image or a sound", param=param)
        return media_bytes(decode_base64(payload, param=param), param=param, kind=kind)
    return media_bytes(decode_base64(source, param=param), param=param, kind=kind)


def decode_base64(text: str, *, param: str) -> bytes:
    """``text``'s bytes (standard or URL-safe base64; whitespace ignored). Raises InvalidRequest naming ``param``."""
    cleaned = "".join(text.split())
    try:
        if "-" in cleaned or "_" in cleaned:
            data = base64.urlsafe_b64decode(cleaned + "=" * (-len(cleaned) % 4))
        else:
            data = base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _bad("the image is not valid base64", param=param, hint=_SEND_AS) from None
    if not data:
        raise _bad("the image is empty", param=param, hint=_SEND_AS)
    return data


_SEND_AS: Final = f"send the image's bytes base64-encoded, or as a data: URI (data:image/png;base64,...): {IMAGE_KINDS}"


def media_bytes(data: bytes, *, param: str, kind: MediaKind | None = None) -> MediaPart:
    """``data`` as a media part, its kind and MIME type sniffed from its bytes, an image's size checked from its
    header; counted against the request's limit. Raises InvalidRequest naming ``param``."""
    state = _state()
    state.parts += 1
    if state.parts > state.limits.max_parts:
        raise _bad(
            f"the request carries more than {state.limits.max_parts} images and sounds",
            param=param,
            hint="send fewer in one request",
        )
    found = sniff(data)
    if found is None:
        raise _bad(
            f"the data is not an image or a sound this server reads ({IMAGE_KINDS}; WAV, MP3 or FLAC)",
            param=param,
            hint=_SEND_AS,
        )
    sniffed_kind, mime = found
    if kind is not None and sniffed_kind != kind:
        raise _bad(f"the data is {mime}, not an {kind}", param=param)
    if sniffed_kind == "image":
        size = image_size(data, mime)
        if size is None:
            raise _bad(f"the {mime} image is truncated or corrupt: its header cannot be read", param=param)
        width, height = size
        if width <= 0 or height <= 0:
            raise _bad(f"the {mime} image states a size of {width} x {height}", param=param)
        if width * height > state.limits.max_pixels:
            raise _bad(
                f"the image is {width} x {height} pixels, more than the {state.limits.max_pixels} this server takes",
                param=param,
                hint="scale it down before sending it",
            )
    return MediaPart(sniffed_kind, data, mime)


def sniff(data: bytes) -> tuple[MediaKind, str] | None:
    """What ``data`` is, from its first bytes: ("image", "image/png")...; None when it is none of those read."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image", "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image", "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image", "image/gif"
    if data.startswith(b"BM") and len(data) >= 26:
        return "image", "image/bmp"
    if data.startswith(b"RIFF") and data[8:12] == b"WAVE":
        return "audio", "audio/wav"
    if data.startswith(b"fLaC"):
        return "audio", "audio/flac"
    if data.startswith(b"ID3") or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "audio", "audio/mpeg"
    return None


def image_size(data: bytes, mime: str) -> tuple[int, int] | None:
    """An image's width and height from its header alone; None when the header is cut short or broken."""
    try:
        if mime == "image/png":
            if data[12:16] != b"IHDR":
                return None
            width, height = struct.unpack(">II", data[16:24])
            return int(width), int(height)
        if mime == "image/gif":
            width, height = struct.unpack("<HH", data[6:10])
            return int(width), int(height)
        if mime == "image/bmp":
            width, height = struct.unpack("<ii", data[18:26])
            return int(width), abs(int(height))
        if mime == "image/jpeg":
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


_SOF_MARKERS: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """A JPEG's size from its first start-of-frame segment."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _SOF_MARKERS:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        if marker == 0xD9 or length < 2:
            return None
        at += 2 + length
    return None


def joined(parts: list[str | MediaPart]) -> tuple[str, tuple[MediaPart, ...]]:
    """A message's text and media parts as llama-server joins them (common_chat_msg::to_json_oaicompat): text parts
    separated by a line break, none before or after a media marker; each media part becomes ``MEDIA_MARKER``."""
    text = ""
    media: list[MediaPart] = []
    last_was_media = False
    for part in parts:
        if isinstance(part, MediaPart):
            text += MEDIA_MARKER
            media.append(part)
            last_was_media = True
            continue
        if text and not last_was_media:
            text += "\n"
        text += part
        last_was_media = False
    return text, tuple(media)


# --- URLs ---------------------------------------------------------------------------------------------------


def _fetched(url: str, param: str) -> bytes:
    state = _state()
    if not state.limits.allow_urls:
        raise _bad(
            "image URLs are not fetched by this server",
            param=param,
            hint="send the image as a data: URI or base64, or start the server with --allow-image-urls",
        )
    found = state.fetched.get(url)
    if found is None:  # prefetch runs before the wire model: a URL it missed is one it does not look for
        raise _bad("the image URL was not fetched", param=param, hint=_SEND_AS)
    return found


def image_urls(body: Any) -> Iterator[str]:
    """The http(s) URLs of images in a request body, in any dialect: OpenAI's ``image_url`` parts, the Responses
    API's ``input_image`` parts and Anthropic's ``image`` blocks with a ``url`` source."""
    stack = [body]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
            continue
        if not isinstance(value, dict):
            continue
        url: Any = None
        kind = value.get("type")
        if kind == "image_url":
            given = value.get("image_url")
            url = given.get("url") if isinstance(given, dict) else given
        elif kind == "input_image":
            url = value.get("image_url")
        elif kind == "image" and isinstance(value.get("source"), dict) and value["source"].get("type") == "url":
            url = value["source"].get("url")
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            yield url
        stack.extend(v for v in value.values() if isinstance(v, dict | list))


async def prefetch(body: Any) -> None:
    """Fetch the image URLs of ``body`` (when the server allows it), for ``media_part`` to find. Raises
    InvalidRequest for a URL that fails, answers other than 200, or passes the size or time limit."""
    state = _state()
    if not state.limits.allow_urls:
        return
    urls = list(dict.fromkeys(image_urls(body)))
    if not urls:
        return
    limits = state.limits
    async with httpx.AsyncClient(follow_redirects=True, max_redirects=3, timeout=limits.url_timeout) as client:
        for url in urls[: limits.max_parts + 1]:
            state.fetched[url] = await _fetch(client, url, limits)


async def _fetch(client: httpx.AsyncClient, url: str, limits: MediaLimits) -> bytes:
    try:
        return await asyncio.wait_for(_download(client, url, limits), timeout=limits.url_timeout)
    except asyncio.TimeoutError:
        raise _bad(
            f"the image URL {url} did not answer within {limits.url_timeout:g} seconds", param="image_url"
        ) from None
    except httpx.HTTPError as exc:
        raise _bad(f"the image URL {url} could not be fetched: {exc}", param="image_url") from None


async def _download(client: httpx.AsyncClient, url: str, limits: MediaLimits) -> bytes:
    async with client.stream("GET", url) as answer:
        if answer.status_code != 200:
            raise _bad(f"the image URL {url} answered {answer.status_code}", param="image_url")
        data = bytearray()
        async for chunk in answer.aiter_bytes():
            data += chunk
            if len(data) > limits.url_max_bytes:
                raise _bad(f"the image at {url} is larger than {limits.url_max_bytes} bytes", param="image_url")
        return bytes(data)
