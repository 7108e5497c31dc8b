"""The fuzz stage: schemathesis over the server's own OpenAPI schema, and wrong types in every field, against a real
server on SmolLM2. No answer is a 5xx or a dropped connection, every 4xx is a JSON error in its route's dialect,
and /health answers 200 after each request.

``/api/pull`` (it would reach for the Hub) and ``/api/delete`` (it could remove the shared test model) are left out
of the schema's cases; their refusals are tested in test_guard.py, test_model_names.py and test_delete.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.config import SchemathesisConfig

from localinfer.app.server.core.dialect import Dialect, dialect_for
from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

# Generating a few tokens is enough to show a request was served; anything more is minutes of CPU for nothing.
MOST_TOKENS = 4
EXCLUDED_PATHS = ("/api/pull", "/api/delete")


@pytest.fixture(scope="module")
def fuzz_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("serve-fuzz")
    slots = tmp_path_factory.mktemp("fuzz-slots")  # slot actions enabled, so their bodies and names are fuzzed too
    flags = ("--ctx-size", "1024", "--parallel", "2", "--slot-save-path", str(slots))
    with serving(smollm2.name, test_home, log_dir, *flags) as server:
        yield server


@pytest.fixture(scope="module")
def api_schema(fuzz_server: Server) -> Any:
    # The fuzzing phase only: random valid and invalid bodies, as many per route as max_examples says (the coverage
    # and examples phases add hundreds of cases, minutes of generation on a 2-core machine).
    phases = {name: {"enabled": name == "fuzzing"} for name in ("coverage", "examples", "fuzzing", "stateful")}
    config = SchemathesisConfig.from_dict({"phases": phases})
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json", config=config)
    return schema.exclude(path=list(EXCLUDED_PATHS))


schema = schemathesis.pytest.from_fixture("api_schema")


def cheap(body: Any) -> Any:
    """``body`` with its token budget cut to a few tokens, when it is an object that names one (llama.cpp's
    ``n_predict`` is -1, the whole context, unless given)."""
    if isinstance(body, dict):
        for field in ("max_tokens", "max_completion_tokens", "n_predict"):
            if isinstance(body.get(field), int) and not isinstance(body.get(field), bool):
                body[field] = max(1, min(body[field], MOST_TOKENS))
        if "max_tokens" not in body and "messages" in body:
            body["max_tokens"] = MOST_TOKENS
        if "prompt" in body and "n_predict" not in body:
            body["n_predict"] = MOST_TOKENS
    return body


def assert_well_formed(path: str, response: httpx.Response | Any, method: str = "POST") -> None:
    """No 5xx; a 4xx is a JSON error in the dialect of its route (an answer to HEAD has no body: its status says it,
    as Ollama's HEAD /api/blobs answers)."""
    status = response.status_code
    assert status < 500, f"{status} from {path}: {response.text[:500]}"
    if status >= 400 and method.upper() != "HEAD":
        error = response.json()["error"]
        dialect = dialect_for(path)
        if dialect is Dialect.OLLAMA:
            assert isinstance(error, str) and error
        elif dialect is Dialect.LLAMACPP:
            assert {"code", "message", "type"} <= set(error) and error["code"] == status, error
        elif dialect is Dialect.ANTHROPIC:
            assert response.json()["type"] == "error" and set(error) == {"type", "message"}, error
        else:
            assert set(error) == {"message", "type", "param", "code"}, error


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_5xx_or_a_bare_error(case: Case[Any], fuzz_server: Server) -> None:
    if case.body is not None:
        case.body = cheap(case.body)
    response = case.call(timeout=120)  # a dropped connection raises here and fails the test
    assert_well_formed(case.path, response, case.method)
    assert httpx.get(f"{fuzz_server.url}/health", timeout=30).status_code == 200


WRONG_VALUES: list[Any] = [None, True, -1, 10**30, 1e308, "x" * 5000, [], {}, [[[[]]]], {"a": {"b": [1, "2"]}}]
CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": MOST_TOKENS}
COMPLETION = {"model": "smollm2", "prompt": "Hi", "max_tokens": MOST_TOKENS}
FIELDS = [
    "model", "messages", "prompt", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p",
    "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty", "seed", "stop", "n",
    "max_tokens", "max_completion_tokens", "response_format", "ignore_eos", "cache_prompt", "logprobs", "echo",
    "suffix",
]  # fmt: skip


@pytest.mark.parametrize("field", FIELDS)
def test_a_wrong_type_in_any_field_is_answered_in_the_dialect(fuzz_server: Server, field: str) -> None:
    with httpx.Client(base_url=fuzz_server.url, timeout=120) as client:
        for path, base in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
            for value in WRONG_VALUES:
                body = cheap({**base, field: value})
                response = client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
                assert_well_formed(path, response)
            messages = [{"role": "user", "content": "Hi", field: value} for value in WRONG_VALUES]
            assert_well_formed(path, client.post(path, json={**base, "messages": messages}))
        assert client.get("/health").status_code == 200
