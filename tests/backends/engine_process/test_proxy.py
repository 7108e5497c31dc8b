"""The proxy, for real: requests relayed to a localinfer stand-in engine and back, byte for byte."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai
import pytest

from localinfer.backends.engine_process.launcher import EngineProcess
from localinfer.backends.engine_process.proxy import EngineProxy
from tests.backends.engine_process.conftest import serving_proxy

pytestmark = pytest.mark.model

COMPLETION = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "seed": 7}
JSON = [("content-type", "application/json")]


def proxy_to(engine: EngineProcess) -> EngineProxy:
    return EngineProxy(engine.url, engine.api_key, alive=lambda: engine.alive)


async def direct(engine: EngineProcess, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {engine.api_key}"}
    async with httpx.AsyncClient(timeout=60) as client:
        return await client.post(f"{engine.url}/v1/completions", json=body, headers=headers)


def settled(sse: bytes) -> bytes:
    """An event stream without what differs from one request to the next: ids, creation times, timings."""
    sse = re.sub(rb'"id": "[^"]*"', b'"id": ""', sse)
    sse = re.sub(rb'"created": \d+', b'"created": 0', sse)
    return re.sub(rb', "timings": \{[^}]*\}', b"", sse)


async def test_a_streamed_completion_is_relayed_byte_for_byte(engine: EngineProcess) -> None:
    body = {**COMPLETION, "stream": True}
    proxy = proxy_to(engine)
    try:
        answer = await proxy.forward("POST", "/v1/completions", JSON, json.dumps(body).encode())
        relayed = await answer.read()
    finally:
        await proxy.aclose()
    assert answer.status == 200
    assert dict(answer.headers)["content-type"].startswith("text/event-stream")
    events = [e for e in relayed.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events)
    assert events[-1] == b"data: [DONE]"
    assert json.loads(events[0][6:])["object"] == "text_completion"
    assert settled(relayed) == settled((await direct(engine, body)).content)


async def test_a_completion_through_the_proxy_equals_a_direct_one(engine: EngineProcess) -> None:
    proxy = proxy_to(engine)
    try:
        answer = await proxy.forward("POST", "/v1/completions", JSON, json.dumps(COMPLETION).encode())
        relayed = json.loads(await answer.read())
    finally:
        await proxy.aclose()
    expected = (await direct(engine, COMPLETION)).json()
    assert answer.status == 200
    assert relayed["choices"] == expected["choices"]
    assert relayed["usage"] == expected["usage"]


async def test_the_proxy_sends_the_engine_key_instead_of_the_clients(engine: EngineProcess) -> None:
    proxy = proxy_to(engine)
    try:
        answer = await proxy.forward("GET", "/v1/models", [("Authorization", "Bearer not-the-key")], b"")
        await answer.read()
    finally:
        await proxy.aclose()
    assert answer.status == 200
    async with httpx.AsyncClient() as client:
        refused = await client.get(f"{engine.url}/v1/models", headers={"Authorization": "Bearer not-the-key"})
    assert refused.status_code == 401


def test_the_openai_client_streams_a_chat_through_a_uvicorn_app(engine: EngineProcess) -> None:
    with serving_proxy(engine) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="front-key", max_retries=0, timeout=60)
        messages: list[Any] = [{"role": "user", "content": "Say hello."}]
        stream = client.chat.completions.create(
            model="smollm2", messages=messages, max_tokens=16, temperature=0, seed=3, stream=True
        )
        chunks = list(stream)
        whole = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=16, temperature=0, seed=3)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed
    assert streamed == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_the_uvicorn_app_relays_paths_with_a_query_and_one_set_of_headers(engine: EngineProcess) -> None:
    with serving_proxy(engine) as url:
        response = httpx.get(f"{url}/v1/models?limit=1", headers={"Authorization": "Bearer front-key"})
    assert response.status_code == 200
    assert response.json()["data"][0]["id"] == "smollm2"
    names = [name.lower() for name, _ in response.headers.multi_items()]
    assert names.count("date") == names.count("server") == names.count("content-length") == 1
