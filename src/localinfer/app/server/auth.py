"""The bearer-key check. The access guard (``guard.py``) applies it to every route but /health, before any body
is read."""

from __future__ import annotations

import secrets

from localinfer.errors import Unauthorized


def key_accepted(authorization: str | None, expected: str) -> bool:
    """Whether an ``Authorization`` header value carries ``Bearer <expected>`` (compared in constant time)."""
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), expected.encode())


def unauthorized() -> Unauthorized:
    """The error a request without the right key gets (401 in every dialect)."""
    return Unauthorized(
        "missing or wrong API key",
        hint="send the header 'Authorization: Bearer <key>' with the server's key",
    )
