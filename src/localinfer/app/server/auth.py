"""The API key check. The access guard (``guard.py``) applies it to every route but /health, before any body
is read.

The key comes as ``Authorization: Bearer <key>`` (OpenAI's and Ollama's clients) or as ``x-api-key: <key>``
(Anthropic's clients: Claude Code, the anthropic SDKs), as llama-server takes it."""

from __future__ import annotations

import secrets

from localinfer.errors import Unauthorized


def _same(given: str, expected: str) -> bool:
    return secrets.compare_digest(given.strip().encode(), expected.encode())


def key_accepted(authorization: str | None, expected: str, *, x_api_key: str | None = None) -> bool:
    """Whether an ``Authorization`` header value carries ``Bearer <expected>``, or an ``x-api-key`` header value is
    ``expected`` (compared in constant time)."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and _same(given, expected):
        return True
    return x_api_key is not None and _same(x_api_key, expected)


def unauthorized() -> Unauthorized:
    """The error a request without the right key gets (401 in every dialect)."""
    return Unauthorized(
        "missing or wrong API key",
        hint="send the header 'Authorization: Bearer <key>' with the server's key",
    )
