"""The one reader of media parts (core/media.py), on its own: what each kind of bytes is sniffed as, an image's size
read from its header alone, base64 and data: URIs, the request's limits, and parts joined as llama-server joins a
message's parts."""

from __future__ import annotations

import struct

import pytest

from localinfer.app.server.core.media import (
    MediaLimits,
    image_size,
    image_urls,
    joined,
    media_part,
    sniff,
    use_media_limits,
)
from localinfer.errors import InvalidRequest
from localinfer.types import MEDIA_MARKER, MediaPart
from tests.images import b64, data_uri, png, png_header_only


def jpeg(width: int, height: int) -> bytes:
    """A JPEG's first segments: start of image, an APP0 segment, then a baseline start of frame."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return b"\xff\xd8" + app0 + sof


@pytest.fixture(autouse=True)
def limits() -> None:
    use_media_limits(MediaLimits(max_parts=3, max_pixels=1000 * 1000))


def test_kinds_are_sniffed_from_the_bytes_not_the_name() -> None:
    assert sniff(png()) == ("image", "image/png")
    assert sniff(jpeg(4, 4)) == ("image", "image/jpeg")
    assert sniff(b"GIF89a" + b"\x00" * 10) == ("image", "image/gif")
    assert sniff(b"RIFF\x00\x00\x00\x00WAVEfmt ") == ("audio", "audio/wav")
    assert sniff(b"fLaC\x00") == ("audio", "audio/flac")
    assert sniff(b"<html>not a picture</html>") is None
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") is None  # WebP: llama.cpp's image reader has none


def test_an_images_size_comes_from_its_header() -> None:
    assert image_size(png(40, 30), "image/png") == (40, 30)
    assert image_size(png_header_only(20_000, 20_000), "image/png") == (20_000, 20_000)
    assert image_size(jpeg(640, 480), "image/jpeg") == (640, 480)
    assert image_size(b"GIF89a" + struct.pack("<HH", 7, 9), "image/gif") == (7, 9)
    assert image_size(png()[:20], "image/png") is None  # cut inside the header


def test_base64_and_data_uris_give_the_same_part() -> None:
    image = png()
    assert media_part(b64(image), param="p") == MediaPart("image", image, "image/png")
    assert media_part(data_uri(image), param="p").data == image
    assert media_part(data_uri(image, "image/jpeg"), param="p").mime == "image/png"  # what the bytes say


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("%%%", "not valid base64"),
        ("data:image/png," + b64(png()), "must be base64"),
        ("data:text/plain;base64," + b64(png()), "text/plain is not an image"),
        (b64(b"hello there, no picture"), "not an image"),
        (b64(png_header_only(2000, 2000)), "2000 x 2000"),
        (b64(png_header_only(0, 5)), "0 x 5"),
        ("https://example.com/x.png", "not fetched"),
        ("file:///etc/passwd", "file: URLs are not read"),
    ],
)
def test_what_is_not_a_readable_image_is_refused_naming_the_part(source: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        media_part(source, param="messages.content")
    assert says in refused.value.message and refused.value.param == "messages.content"


def test_a_request_carries_at_most_max_parts() -> None:
    for _ in range(3):
        media_part(b64(png()), param="p")
    with pytest.raises(InvalidRequest, match="more than 3"):
        media_part(b64(png()), param="p")


def test_a_sound_where_an_image_must_be_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="not an image"):
        media_part(b64(b"RIFF\x00\x00\x00\x00WAVEfmt "), param="p", kind="image")


def test_parts_are_joined_as_llama_server_joins_them() -> None:
    a, b = MediaPart("image", png(seed=1), "image/png"), MediaPart("image", png(seed=2), "image/png")
    assert joined(["Hi", "there"]) == ("Hi\nthere", ())
    assert joined(["Look:", a, "and", b, "then?"]) == (f"Look:{MEDIA_MARKER}and{MEDIA_MARKER}then?", (a, b))
    assert joined([a, "What?"]) == (f"{MEDIA_MARKER}What?", (a,))


def test_image_urls_are_found_in_every_dialects_shape() -> None:
    body = {
        "messages": [
            {"content": [{"type": "image_url", "image_url": {"url": "http://a/1.png"}}]},
            {"content": [{"type": "image", "source": {"type": "url", "url": "https://b/2.png"}}]},
            {"content": [{"type": "image_url", "image_url": {"url": data_uri(png())}}]},
        ],
        "input": [{"content": [{"type": "input_image", "image_url": "http://c/3.png"}]}],
        "other": {"url": "http://not-an-image-part/"},
    }
    assert sorted(image_urls(body)) == ["http://a/1.png", "http://c/3.png", "https://b/2.png"]
