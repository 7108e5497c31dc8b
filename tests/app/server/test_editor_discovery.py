"""How Copilot Chat's and Zed's Ollama providers find and use a model, replayed against a real server with the
real SmolLM2: the requests are those their sources send, and each step reads what the client reads."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.app.server.conftest import Server

pytestmark = pytest.mark.model


def version_at_least(version: str, minimum: str) -> bool:
    """Copilot's comparison: dot-separated numbers, missing parts as 0."""
    have = [int(part) for part in version.split(".")]
    need = [int(part) for part in minimum.split(".")]
    width = max(len(have), len(need))
    return have + [0] * (width - len(have)) >= need + [0] * (width - len(need))


def test_copilot_chats_ollama_provider_finds_the_model_and_chats_with_it(smollm2_server: Server) -> None:
    # microsoft/vscode-copilot-chat src/extension/byok/vscode-node/ollamaProvider.ts (at a37e9440): _checkOllamaVersion
    # (GET /api/version, at least 0.6.4), GET /api/tags, then POST /api/show {model: model.model} for each, reading
    # model_info[`${general.architecture}.context_length`] and capabilities 'tools' / 'vision'; then it chats
    # through the OpenAI-compatible /v1/chat/completions with that model id
    url = smollm2_server.url
    assert version_at_least(httpx.get(f"{url}/api/version").json()["version"], "0.6.4")
    models = httpx.get(f"{url}/api/tags").json()["models"]
    assert models
    for model in models:
        show = httpx.post(f"{url}/api/show", json={"model": model["model"]}, timeout=60)
        assert show.status_code == 200, show.text
        info = show.json()
        assert isinstance(info["model_info"][f"{info['model_info']['general.architecture']}.context_length"], int)
        assert isinstance(info["capabilities"], list)
    served = next(m["model"] for m in models if m["model"].startswith("smollm2"))
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": served, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": False},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"]


def test_zeds_ollama_provider_finds_the_model_and_streams_a_chat(smollm2_server: Server) -> None:
    # zed-industries/zed crates/ollama/src/ollama.rs (at 0138cb1c): get_models (GET /api/tags, every listing must have
    # name, modified_at, size, digest and details with format, family, parameter_size, quantization_level),
    # show_model (POST /api/show {"model"}, reading capabilities), then stream_chat_completion with ChatRequest as
    # serde writes it: unset options as null, an empty tools list, keep_alive -1, think null
    url = smollm2_server.url
    listings = httpx.get(f"{url}/api/tags", headers={"Accept": "application/json"}).json()["models"]
    for listing in listings:
        assert {"name", "modified_at", "size", "digest", "details"} <= set(listing)
        details = listing["details"]
        assert all(isinstance(details[k], str) for k in ("format", "family", "parameter_size", "quantization_level"))
    name = next(m["name"] for m in listings if m["name"].startswith("smollm2"))
    capabilities = httpx.post(f"{url}/api/show", json={"model": name}).json()["capabilities"]
    assert "completion" in capabilities
    request = {
        "model": name,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say hello."},
        ],
        "stream": True,
        "keep_alive": -1,
        "options": {"num_ctx": 4096, "num_predict": 12, "stop": None, "temperature": None, "top_p": None},
        "tools": [],
        "think": None,
    }
    reply = httpx.post(f"{url}/api/chat", json=request, timeout=120)
    assert reply.status_code == 200, reply.text
    deltas = [json.loads(line) for line in reply.text.splitlines() if line.strip()]
    assert "".join(d["message"]["content"] for d in deltas).strip()
    assert deltas[-1]["done"] is True and deltas[-1]["eval_count"] <= 12


def test_null_fields_are_defaults_on_the_openai_routes_too(smollm2_server: Server, model_name: str) -> None:
    body = {
        "model": model_name,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
        "temperature": None,
        "top_p": None,
        "stop": None,
        "seed": None,
        "stream_options": None,
        "tools": None,
        "tool_choice": None,
    }
    reply = httpx.post(f"{smollm2_server.url}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
