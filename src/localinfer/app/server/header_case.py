"""Response header names spelt as llama-server writes them: ``Access-Control-Allow-Origin``,
``Process-Start-Time-Unix``, ``Content-Type``.

HTTP says the case of a header name does not matter, but llama.cpp's own tooling and several clients look names up
case-sensitively. Starlette lowercases every name it is given, and uvicorn's httptools protocol lowercases them
again as it writes them; its h11 protocol writes a name as it is given. So ``serve`` runs uvicorn with h11, and this
middleware, outermost, gives each name its canonical spelling (each word capitalised, as cpp-httplib's callers
write them) before it goes out. The names stay lowercase for every middleware and route inside. uvicorn's own
``date`` and ``server`` headers are turned off (``UVICORN_OPTIONS``) and written here, spelt the same way.
"""

from __future__ import annotations

import email.utils
import functools
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# uvicorn.Config's options for it: the HTTP protocol that writes header names as it is given them, and none of the
# headers it writes itself in lowercase
UVICORN_OPTIONS: Final[dict[str, Any]] = {"http": "h11", "server_header": False, "date_header": False}
SERVER: Final = b"localinfer"


class HeaderCase:
    """Writes the response header names of ``app`` in their canonical spelling."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def spelt(message: Message) -> None:
            if message["type"] == "http.response.start":
                stamp = [(b"Date", email.utils.formatdate(usegmt=True).encode()), (b"Server", SERVER)]
                headers = [(canonical(n), v) for n, v in message.get("headers", [])]
                message = {**message, "headers": [*stamp, *headers]}
            await send(message)

        await self.app(scope, receive, spelt)


SPELT_OTHERWISE = {b"etag": b"ETag", b"www-authenticate": b"WWW-Authenticate"}


@functools.lru_cache(maxsize=256)
def canonical(name: bytes) -> bytes:
    """``access-control-allow-origin`` as ``Access-Control-Allow-Origin`` (and the few spelt otherwise)."""
    lower = name.lower()
    return SPELT_OTHERWISE.get(lower) or b"-".join(word[:1].upper() + word[1:] for word in lower.split(b"-"))
