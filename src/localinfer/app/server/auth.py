"""Bearer-key check for every route except /health."""

from __future__ import annotations

import secrets

from fastapi import Request

from localinfer.errors import Unauthorized


async def require_api_key(request: Request) -> None:
    """A FastAPI dependency: passes when no key is configured or the request carries the right bearer key.

    Raises Unauthorized otherwise.
    """
    expected: str | None = request.app.state.api_key
    if expected is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), expected.encode()):
        raise Unauthorized(
            "missing or wrong API key",
            hint="send the header 'Authorization: Bearer <key>' with the server's key",
        )
