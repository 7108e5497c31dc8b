"""``curl -d '{...}'`` labels its JSON body a form; llama-server and Ollama read it as JSON, and so does every
route here, in every dialect."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.app.server.conftest import Server

pytestmark = pytest.mark.model

HI = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize("label", ["application/x-www-form-urlencoded", "text/plain", None])
@pytest.mark.parametrize(
    ("path", "body", "answer"),
    [
        ("/v1/chat/completions", {"messages": HI, "max_tokens": 2}, "choices"),
        ("/completion", {"prompt": "Hi", "n_predict": 2}, "content"),
        ("/tokenize", {"content": "Hi"}, "tokens"),
        ("/api/chat", {"messages": HI, "options": {"num_predict": 2}, "stream": False}, "message"),
    ],
)
def test_a_json_body_is_read_whatever_its_label(
    smollm2_server: Server, model_name: str, label: str | None, path: str, body: dict[str, object], answer: str
) -> None:
    headers = {"Content-Type": label} if label else {}
    content = json.dumps({"model": model_name, **body}).encode()
    reply = httpx.post(f"{smollm2_server.url}{path}", content=content, headers=headers, timeout=60)
    assert reply.status_code == 200, reply.text
    assert answer in reply.json()
