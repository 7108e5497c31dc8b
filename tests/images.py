"""Small test images written in the tests: PNG with zlib, and the headers of other formats, without an imaging
library. Each picture is a pattern drawn from a seed, so two seeds give two different pictures."""

from __future__ import annotations

import base64
import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width: int = 32, height: int = 32, seed: int = 1) -> bytes:
    """An RGB PNG of ``width`` x ``height`` with a pattern drawn from ``seed``."""
    rows = []
    for y in range(height):
        row = bytearray(b"\x00")  # no filter
        for x in range(width):
            row += bytes(((x * 7 + y * 13 + seed * 61) % 256, (x * y + seed * 17) % 256, (x * 3 + seed * 5 + y) % 256))
        rows.append(bytes(row))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + _chunk(b"IEND", b"")
    )


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that states ``width`` x ``height`` and has no pixels: what a decompression bomb's header looks like."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"\x00" * 64))


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
