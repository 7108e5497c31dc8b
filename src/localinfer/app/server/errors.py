"""The one table that maps localinfer errors to HTTP statuses, and the OpenAI, Ollama, llama.cpp and Anthropic
error shapes.

Other dialects (Ollama, llama.cpp, Anthropic) reuse ``status_for`` and only change the body's shape; ``error_for``
and ``error_body_for`` pick the shape by dialect (``core/dialect.py`` says which a route speaks).
"""

from __future__ import annotations

from typing import Any

from localinfer.app.server.core.dialect import Dialect
from localinfer.errors import (
    ContextLengthExceeded,
    DiskFull,
    Forbidden,
    GenerationFailed,
    HubUnreachable,
    InvalidRequest,
    LocalInferError,
    ModelLoadError,
    ModelManagedElsewhere,
    ModelNotFound,
    ModelNotReady,
    NotSupported,
    PullError,
    QuantizeError,
    QueueFull,
    RpcWorkerLost,
    ServerShuttingDown,
    Unauthorized,
)

# (error class, HTTP status, OpenAI error type, OpenAI error code); the first matching row wins.
ERROR_TABLE: tuple[tuple[type[LocalInferError], int, str, str | None], ...] = (
    (ModelNotFound, 404, "invalid_request_error", "model_not_found"),
    (ContextLengthExceeded, 400, "invalid_request_error", "context_length_exceeded"),
    (InvalidRequest, 400, "invalid_request_error", None),
    (Unauthorized, 401, "authentication_error", "invalid_api_key"),
    (Forbidden, 403, "permission_error", "forbidden"),
    (QueueFull, 503, "server_error", "queue_full"),
    (ServerShuttingDown, 503, "server_error", "server_shutting_down"),
    (ModelNotReady, 503, "server_error", "model_loading"),
    (RpcWorkerLost, 503, "server_error", "rpc_worker_lost"),
    (ModelLoadError, 500, "server_error", "model_load_failed"),
    (ModelManagedElsewhere, 409, "invalid_request_error", "model_managed_elsewhere"),
    (HubUnreachable, 502, "server_error", "hub_unreachable"),
    (DiskFull, 507, "server_error", "disk_full"),
    (PullError, 400, "invalid_request_error", "pull_failed"),
    (QuantizeError, 400, "invalid_request_error", "quantize_failed"),  # /api/create's quantize
    (GenerationFailed, 500, "server_error", "generation_failed"),
    (NotSupported, 501, "not_supported_error", "not_supported"),
    (LocalInferError, 500, "server_error", None),
)


# Errors a client should retry after a moment: they say so with Retry-After (seconds), as Ollama and vLLM do.
RETRY_AFTER_SECONDS: tuple[tuple[type[LocalInferError], int], ...] = ((QueueFull, 1), (ModelNotReady, 1))


def headers_for(exc: LocalInferError) -> dict[str, str]:
    """HTTP headers that go with ``exc``'s answer: ``Retry-After`` for a full queue or a model still loading."""
    for cls, seconds in RETRY_AFTER_SECONDS:
        if isinstance(exc, cls):
            return {"Retry-After": str(seconds)}
    return {}


def finish_reason_for(exc: LocalInferError) -> str:
    """The finish reason (OpenAI) or ``done_reason`` (Ollama) of a stream that ``exc`` ended: ``abort`` when the
    server stopped it (shutting down), ``error`` for a failure, as vLLM names them."""
    return "abort" if isinstance(exc, ServerShuttingDown) else "error"


def _row(exc: LocalInferError) -> tuple[int, str, str | None]:
    for cls, status, kind, code in ERROR_TABLE:
        if isinstance(exc, cls):
            return status, kind, code
    raise AssertionError("LocalInferError is the last row")  # pragma: no cover


def status_for(exc: LocalInferError) -> int:
    return _row(exc)[0]


def user_message(exc: LocalInferError) -> str:
    return f"{exc.message}; {exc.hint}" if exc.hint else exc.message


def openai_error_body(message: str, kind: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def openai_error(exc: LocalInferError) -> tuple[int, dict[str, Any]]:
    """The status and OpenAI-shaped body for ``exc``."""
    status, kind, code = _row(exc)
    param = exc.param if isinstance(exc, InvalidRequest) else None
    return status, openai_error_body(user_message(exc), kind, param=param, code=code)


def ollama_error_body(message: str) -> dict[str, Any]:
    """Ollama's error shape: ``{"error": "<message>"}``."""
    return {"error": message}


def ollama_error(exc: LocalInferError) -> tuple[int, dict[str, Any]]:
    """The status and Ollama-shaped body for ``exc``."""
    return status_for(exc), ollama_error_body(user_message(exc))


# llama-server's error types by status (tools/server/server-common.cpp, format_error_response); a prompt past the
# context has its own type, with the numbers.
LLAMACPP_TYPES: dict[int, str] = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


def llamacpp_error_body(message: str, status: int, kind: str | None = None) -> dict[str, Any]:
    """llama-server's error shape: ``{"error": {"code": <status>, "message": ..., "type": ...}}``, the type from
    the status unless ``kind`` is given."""
    kind = kind or LLAMACPP_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"code": status, "message": message, "type": kind}}


def llamacpp_error(exc: LocalInferError) -> tuple[int, dict[str, Any]]:
    """The status and llama.cpp-shaped body for ``exc``."""
    status = status_for(exc)
    if isinstance(exc, ContextLengthExceeded):
        body = llamacpp_error_body(user_message(exc), status, "exceed_context_size_error")
        body["error"].update(n_prompt_tokens=exc.n_prompt, n_ctx=exc.n_ctx)
        return status, body
    return status, llamacpp_error_body(user_message(exc), status)


# Anthropic's error types by status (its API's "Errors" page); a full queue or a model still loading is
# "overloaded_error" (Anthropic answers it with 529; here the status stays 503, with its Retry-After).
ANTHROPIC_TYPES: dict[int, str] = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error_body(message: str, status: int) -> dict[str, Any]:
    """Anthropic's error shape: ``{"type": "error", "error": {"type": ..., "message": ...}}``, the type from the
    status (``invalid_request_error`` below 500, ``api_error`` from 500)."""
    kind = ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_error(exc: LocalInferError) -> tuple[int, dict[str, Any]]:
    """The status and Anthropic-shaped body for ``exc``; the field at fault, when known, starts the message."""
    status = status_for(exc)
    message = user_message(exc)
    if isinstance(exc, InvalidRequest) and exc.param and not message.startswith(f"{exc.param}:"):
        message = f"{exc.param}: {message}"
    return status, anthropic_error_body(message, status)


def error_for(dialect: Dialect, exc: LocalInferError) -> tuple[int, dict[str, Any]]:
    """The status and body for ``exc`` in ``dialect``'s shape."""
    if dialect is Dialect.OLLAMA:
        return ollama_error(exc)
    if dialect is Dialect.LLAMACPP:
        return llamacpp_error(exc)
    if dialect is Dialect.ANTHROPIC:
        return anthropic_error(exc)
    return openai_error(exc)


def error_body_for(
    dialect: Dialect, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """A body in ``dialect``'s shape for an error that is no LocalInferError (a body the server refuses to parse,
    a validation failure, an unknown route): ``param`` and ``code`` are OpenAI's and only it shows them."""
    if dialect is Dialect.OLLAMA:
        return ollama_error_body(message)
    if dialect is Dialect.LLAMACPP:
        return llamacpp_error_body(message, status)
    if dialect is Dialect.ANTHROPIC:
        return anthropic_error_body(message, status)
    kind = "invalid_request_error" if status < 500 else "server_error"
    return openai_error_body(message, kind, param=param, code=code)
