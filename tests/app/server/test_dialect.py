"""core/dialect.py and errors.py: which error shape a path gets, and llama-server's shape itself."""

from __future__ import annotations

import pytest

from localinfer.app.server.core.dialect import Dialect, dialect_for
from localinfer.app.server.errors import error_body_for, error_for
from localinfer.errors import ContextLengthExceeded, InvalidRequest, ModelNotFound, ModelNotReady


@pytest.mark.parametrize(
    "path,dialect",
    [
        ("/api/chat", Dialect.OLLAMA),
        ("/completion", Dialect.LLAMACPP),
        ("/completions", Dialect.LLAMACPP),
        ("/infill", Dialect.LLAMACPP),
        ("/tokenize", Dialect.LLAMACPP),
        ("/metrics", Dialect.LLAMACPP),
        ("/v1/completions", Dialect.OPENAI),
        ("/nowhere", Dialect.OPENAI),
    ],
)
def test_each_path_speaks_one_dialect(path: str, dialect: Dialect) -> None:
    assert dialect_for(path) is dialect


def test_llamacpp_errors_carry_code_message_and_type() -> None:
    assert error_for(Dialect.LLAMACPP, InvalidRequest("bad", param="x")) == (
        400,
        {"error": {"code": 400, "message": "bad", "type": "invalid_request_error"}},
    )
    status, body = error_for(Dialect.LLAMACPP, ModelNotFound("nope"))
    assert status == 404 and body["error"]["type"] == "not_found_error"
    status, body = error_for(Dialect.LLAMACPP, ModelNotReady("loading"))
    assert status == 503 and body["error"]["type"] == "unavailable_error"


def test_a_prompt_past_the_context_says_the_numbers_as_llama_server_does() -> None:
    status, body = error_for(Dialect.LLAMACPP, ContextLengthExceeded(n_prompt=3000, n_ctx=2048))
    assert status == 400
    assert body["error"]["type"] == "exceed_context_size_error"
    assert (body["error"]["n_prompt_tokens"], body["error"]["n_ctx"]) == (3000, 2048)


def test_other_errors_take_each_dialects_shape() -> None:
    assert error_body_for(Dialect.OLLAMA, 413, "too big") == {"error": "too big"}
    assert error_body_for(Dialect.LLAMACPP, 413, "too big")["error"]["code"] == 413
    assert set(error_body_for(Dialect.OPENAI, 400, "bad", param="x")["error"]) == {"message", "type", "param", "code"}
