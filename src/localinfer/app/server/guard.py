"""Who may use the server: the Host check, the CORS allow-list and the API key, before routing and before any
body is read.

As Ollama after CVE-2024-28224 (DNS rebinding), a server bound to loopback answers only to loopback names
(``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``[::1]``), the address it is bound to, and the hosts allowed
with ``--allow-host``; bound elsewhere, also to IP addresses and the machine's own name. A web page's requests
carry an ``Origin``: as ``OLLAMA_ORIGINS``, local pages (``http(s)://localhost``, ``127.0.0.1``, ``[::1]`` on
any port), ``app://``, ``file://``, ``tauri://`` and ``vscode-webview://`` are allowed, plus the origins given
with ``--cors-origin`` (``*`` matches anything). Preflights from those are answered; other origins get no CORS
header, and their requests that change state (POST, PUT, PATCH, DELETE) are refused whatever their content
type, since browsers send a ``text/plain`` POST without asking first. With an API key, every route but /health
needs it (the docs and ``/openapi.json`` too), as a bearer token or an ``x-api-key`` header (``auth.py``);
preflights do not, as browsers send them without credentials.

Refusals are 403 (401 for the key) in the route's dialect (``core/dialect.py``): ``{"error": "..."}`` on
``/api/*``, Anthropic's shape on ``/v1/messages``, OpenAI's elsewhere.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localinfer.app.server.auth import key_accepted, unauthorized
from localinfer.app.server.core.dialect import dialect_for
from localinfer.app.server.errors import error_for
from localinfer.errors import Forbidden, LocalInferError

OPEN_PATHS: Final = frozenset({"/health", "/v1/health"})
STATE_CHANGING: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ALLOWED_METHODS: Final = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
DEFAULT_ALLOWED_HEADERS: Final = "Authorization, Content-Type, Accept, User-Agent, X-Requested-With"
PREFLIGHT_MAX_AGE: Final = "600"
_LOCAL_ORIGIN = re.compile(r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?$", re.IGNORECASE)
_APP_ORIGIN = re.compile(r"^(app|file|tauri|vscode-webview)://.*$", re.IGNORECASE)
_HEADER_NAMES = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$")


def _glob(pattern: str) -> re.Pattern[str]:
    """``pattern`` with ``*`` matching any run of characters and nothing else special."""
    parts = (".*" if part == "*" else re.escape(part) for part in re.split(r"(\*)", pattern.strip()))
    return re.compile("^" + "".join(parts) + "$", re.IGNORECASE)


def host_name(host_header: str) -> str | None:
    """The name in a ``Host`` header, lowercased, without its port, brackets or trailing dot; None when the
    header is malformed (a port that is not a number, an unclosed bracket)."""
    value = host_header.strip().lower()
    if value.startswith("["):
        inside, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return inside
    if value.count(":") == 1:
        value, _, port = value.partition(":")
        if not port.isdigit():
            return None
    return value.rstrip(".")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def is_loopback_name(name: str) -> bool:
    """``localhost``, a name under ``.localhost``, or a loopback address (127.0.0.0/8, ::1)."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = _ip(name)
    return address is not None and address.is_loopback


def _machine_names() -> frozenset[str]:
    hostname = socket.gethostname().lower().rstrip(".")
    return frozenset(n for n in (hostname, hostname.split(".")[0], f"{hostname.split('.')[0]}.local") if n)


@dataclass(frozen=True)
class AccessPolicy:
    """Who may use a server bound to ``bind_host``: the hosts and origins allowed beyond the defaults, and the
    API key (None: no key)."""

    bind_host: str = "127.0.0.1"
    allow_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    api_key: str | None = None
    _origins: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_origins", tuple(_glob(o) for o in self.cors_origins if o.strip()))

    @property
    def bound_to_loopback(self) -> bool:
        bound = host_name(self.bind_host)
        return bound is not None and is_loopback_name(bound)

    def host_allowed(self, host_header: str | None) -> bool:
        """Whether a request with this ``Host`` header is answered. No header at all (HTTP/1.0) is: browsers,
        through which DNS rebinding works, always send one."""
        if host_header is None:
            return True
        name = host_name(host_header)
        if name is None:
            return False
        if is_loopback_name(name) or name == host_name(self.bind_host) or self._listed_host(name):
            return True
        if self.bound_to_loopback:
            return False
        return _ip(name) is not None or name in _machine_names()

    def _listed_host(self, name: str) -> bool:
        return any(entry.strip() == "*" or host_name(entry) == name for entry in self.allow_hosts)

    def origin_allowed(self, origin: str, host_header: str | None) -> bool:
        """Whether a page of ``origin`` may use the server: the defaults, the configured origins, or the server's
        own origin (its docs page)."""
        origin = origin.strip()
        if _LOCAL_ORIGIN.match(origin) or _APP_ORIGIN.match(origin):
            return True
        if any(pattern.match(origin) for pattern in self._origins):
            return True
        return host_header is not None and origin.lower() in {
            f"http://{host_header.strip().lower()}",
            f"https://{host_header.strip().lower()}",
        }


class AccessGuard:
    """ASGI middleware enforcing an ``AccessPolicy``; put it outside every other middleware."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path: str = scope["path"]
        method: str = scope["method"]
        host = headers.get("host")
        if not self.policy.host_allowed(host):
            shown = (host or "").strip()[:100]
            refusal = Forbidden(
                f"this server does not answer to the host '{shown}'",
                hint=f"start it with --allow-host {host_name(shown) or 'NAME'} to allow that name",
            )
            await _refuse(refusal, path)(scope, receive, send)
            return
        origin = headers.get("origin")
        allowed_origin = origin is not None and self.policy.origin_allowed(origin, host)
        if method == "OPTIONS" and origin is not None and "access-control-request-method" in headers:
            await self._preflight(origin, allowed_origin, headers, path)(scope, receive, send)
            return
        cors = _cors_headers(origin) if origin is not None and allowed_origin else {}
        if origin is not None and not allowed_origin and method in STATE_CHANGING:
            refusal = Forbidden(
                f"requests from web pages of {origin[:100]} are not allowed",
                hint="start the server with --cors-origin ORIGIN to allow a page's origin",
            )
            await _refuse(refusal, path)(scope, receive, send)
            return
        key = self.policy.api_key
        if (
            key is not None
            and path not in OPEN_PATHS
            and not key_accepted(headers.get("authorization"), key, x_api_key=headers.get("x-api-key"))
        ):
            response = _refuse(unauthorized(), path, {**cors, "WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        if not cors:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                response_headers = MutableHeaders(scope=message)
                for name, value in cors.items():
                    if name == "Vary":
                        response_headers.add_vary_header(value)
                    else:
                        response_headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _preflight(self, origin: str, allowed: bool, headers: Headers, path: str) -> Response:
        """200 (as llama-server answers) with what a page of an allowed origin may send; 403 without any CORS header
        otherwise."""
        if not allowed:
            return _refuse(
                Forbidden(
                    f"requests from web pages of {origin[:100]} are not allowed",
                    hint="start the server with --cors-origin ORIGIN to allow a page's origin",
                ),
                path,
            )
        asked = headers.get("access-control-request-headers", "").strip()
        allowed_headers = asked if asked and _HEADER_NAMES.match(asked) else DEFAULT_ALLOWED_HEADERS
        return Response(
            status_code=200,
            headers={
                **_cors_headers(origin),
                "Access-Control-Allow-Methods": ALLOWED_METHODS,
                "Access-Control-Allow-Headers": allowed_headers,
                "Access-Control-Max-Age": PREFLIGHT_MAX_AGE,
                "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            },
        )


def _cors_headers(origin: str) -> dict[str, str]:
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}


def _refuse(exc: LocalInferError, path: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """``exc`` as an answer in the dialect of ``path`` (``core/dialect.py``)."""
    status, body = error_for(dialect_for(path), exc)
    return JSONResponse(body, status_code=status, headers=headers)


def policy_for(
    bind_host: str, *, allow_hosts: Iterable[str] = (), cors_origins: Iterable[str] = (), api_key: str | None = None
) -> AccessPolicy:
    """An ``AccessPolicy`` from settings' lists (empty entries dropped)."""
    return AccessPolicy(
        bind_host=bind_host,
        allow_hosts=tuple(h.strip() for h in allow_hosts if h.strip()),
        cors_origins=tuple(o.strip() for o in cors_origins if o.strip()),
        api_key=api_key,
    )
