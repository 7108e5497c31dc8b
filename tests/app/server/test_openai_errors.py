"""Every error answers in the OpenAI shape with the right status, from a real server."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving, tokens_predicted

pytestmark = pytest.mark.model


def assert_openai_error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == kind
    assert error["message"]
    return error


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 404
    assert caught.value.code == "model_not_found"


def test_malformed_json_is_400(smollm2_server: Server) -> None:
    response = httpx.post(
        f"{smollm2_server.url}/v1/chat/completions",
        content=b'{"model": "x", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert_openai_error(response, 400, "invalid_request_error")


def test_invalid_field_is_400_naming_the_param(smollm2_server: Server, model_name: str) -> None:
    body = {"model": model_name, "messages": [{"role": "user", "content": "hi"}], "temperature": 7}
    error = assert_openai_error(
        httpx.post(f"{smollm2_server.url}/v1/chat/completions", json=body), 400, "invalid_request_error"
    )
    assert error["param"] == "temperature"


def test_missing_messages_is_400(smollm2_server: Server, model_name: str) -> None:
    response = httpx.post(f"{smollm2_server.url}/v1/chat/completions", json={"model": model_name})
    assert assert_openai_error(response, 400, "invalid_request_error")["param"] == "messages"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("logit_bias", {"4200000": 100}),  # a token the model does not have (llama-server drops it, unsaid)
    ],
)
def test_a_field_that_would_change_the_answer_is_refused_never_dropped(
    smollm2_server: Server, model_name: str, field: str, value: Any
) -> None:
    body = {"model": model_name, "messages": [{"role": "user", "content": "hi"}], field: value}
    response = httpx.post(f"{smollm2_server.url}/v1/chat/completions", json=body)
    assert assert_openai_error(response, 400, "invalid_request_error")["param"] == field


def test_prompt_longer_than_the_context_is_400_with_the_numbers(client: openai.OpenAI, model_name: str) -> None:
    long_prompt = "hello " * 3000  # the test server runs with --ctx-size 2048
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=model_name, prompt=long_prompt, max_tokens=4)
    assert caught.value.code == "context_length_exceeded"
    message = str(caught.value.body)
    assert "2048" in message and "300" in message  # the prompt's ~3000 tokens and the context's 2048


def test_models_list_has_the_served_model(client: openai.OpenAI, model_name: str) -> None:
    ids = [m.id for m in client.models.list()]
    assert model_name in ids
    assert client.models.retrieve(model_name).id == model_name


def test_unknown_route_is_404_in_openai_shape(smollm2_server: Server) -> None:
    assert_openai_error(httpx.get(f"{smollm2_server.url}/v1/nothing-here"), 404, "invalid_request_error")


def test_disconnected_stream_frees_its_slot_at_once(smollm2_server: Server, model_name: str) -> None:
    body = {
        "model": model_name,
        "prompt": "Once upon a time",
        "max_tokens": 2000,  # the test server's context is 2048 tokens
        "ignore_eos": True,
        "stream": True,
    }
    before = tokens_predicted(smollm2_server.url)
    with httpx.stream("POST", f"{smollm2_server.url}/v1/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in received)
        assert httpx.get(f"{smollm2_server.url}/health").json()["slots_processing"] == 1
    deadline = time.monotonic() + 300  # a bound on the wait only: what is checked is what was generated
    while httpx.get(f"{smollm2_server.url}/health").json()["slots_processing"] != 0:
        assert time.monotonic() < deadline, "the slot was never freed"
        time.sleep(0.02)
    assert tokens_predicted(smollm2_server.url) - before < 1000, "the generation went on after the client left"


@pytest.fixture(scope="module")
def keyed_server(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("serve-key"), "--api-key", "sesame") as server:
        yield server


def test_wrong_api_key_is_401(keyed_server: Server) -> None:
    client = openai.OpenAI(base_url=f"{keyed_server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        client.models.list()
    assert caught.value.status_code == 401
    assert_openai_error(httpx.get(f"{keyed_server.url}/v1/models"), 401, "authentication_error")


def test_right_api_key_is_let_in_and_health_needs_none(keyed_server: Server, smollm2: Manifest) -> None:
    client = openai.OpenAI(base_url=f"{keyed_server.url}/v1", api_key="sesame", max_retries=0)
    assert smollm2.name in [m.id for m in client.models.list()]
    assert httpx.get(f"{keyed_server.url}/health").status_code == 200


def test_binding_beyond_loopback_without_a_key_is_refused(smollm2: Manifest, tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "serve", str(smollm2.path), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"LOCALINFER_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    assert "--api-key" in result.stderr and "LOCALINFER_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr
