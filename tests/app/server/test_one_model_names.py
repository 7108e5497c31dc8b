"""A server started with one model answers llama-server's way: a request naming any model nobody serves gets that
model on the OpenAI, Anthropic and llama.cpp routes, and the answer names the model served. Ollama's routes keep
Ollama's 404; a name that looks like a path keeps the same 404 as ever; ``--strict-model-names`` and a server of
several models keep the 404. Against real servers, with the official openai and anthropic clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

HI = [{"role": "user", "content": "Say hi."}]
PATH_NAMES = ["/etc/passwd", "~/x.gguf", "../x", "stolen.gguf", "C:\\models\\x.gguf", "a/../b"]


@pytest.fixture(scope="module")
def one_model(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("one"), "--ctx-size", "1024") as server:
        yield server


def test_any_model_name_gets_the_one_model_and_the_answer_names_it(one_model: Server, smollm2: Manifest) -> None:
    client = openai.OpenAI(base_url=f"{one_model.url}/v1", api_key="unused", max_retries=0, timeout=120)
    chat = client.chat.completions.create(model="gpt-3.5-turbo", messages=HI, max_tokens=3)  # type: ignore[arg-type]
    assert chat.model == smollm2.name and chat.choices[0].message.content
    text = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Hello", max_tokens=3)
    assert text.model == smollm2.name and text.choices[0].text
    native = httpx.post(
        f"{one_model.url}/completion", json={"model": "whatever", "prompt": "Hi", "n_predict": 2}, timeout=120
    )
    assert native.status_code == 200 and native.json()["model"] == smollm2.name


def test_claude_code_naming_a_claude_model_gets_the_one_model(one_model: Server, smollm2: Manifest) -> None:
    client = anthropic.Anthropic(base_url=one_model.url, api_key="unused", max_retries=0, timeout=120)
    reply = client.messages.create(model="claude-haiku-4-5", max_tokens=3, messages=HI)  # type: ignore[arg-type]
    assert reply.model == smollm2.name and reply.content


def test_ollama_routes_keep_ollamas_404_for_an_unknown_name(one_model: Server) -> None:
    reply = httpx.post(
        f"{one_model.url}/api/chat", json={"model": "llama3", "messages": HI, "stream": False}, timeout=120
    )
    assert reply.status_code == 404 and "llama3" in reply.json()["error"]


def test_a_name_that_looks_like_a_path_keeps_its_404(one_model: Server) -> None:
    for name in PATH_NAMES:
        body = {"model": name, "messages": HI, "max_tokens": 2}
        reply = httpx.post(f"{one_model.url}/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 404, name
        assert reply.json()["error"]["message"].startswith(f"model '{name}' not found"), reply.text


@pytest.mark.parametrize("extra", [("--strict-model-names",), ("--pin", "PINNED")], ids=["strict", "pinned"])
def test_strict_names_or_several_models_answer_an_unknown_name_with_404(
    extra: tuple[str, ...], smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    flags = tuple(smollm2.name if flag == "PINNED" else flag for flag in extra)
    with serving(smollm2.name, test_home, tmp_path, "--ctx-size", "512", *flags) as server:
        body = {"model": "gpt-3.5-turbo", "messages": HI, "max_tokens": 2}
        reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 404 and reply.json()["error"]["code"] == "model_not_found"
        served = httpx.post(f"{server.url}/v1/chat/completions", json={**body, "model": smollm2.name}, timeout=120)
        assert served.status_code == 200


def test_unloading_a_name_nobody_serves_is_a_404_and_unloads_nothing(one_model: Server, smollm2: Manifest) -> None:
    reply = httpx.post(f"{one_model.url}/models/unload", json={"model": "gpt-3.5-turbo"}, timeout=60)
    assert reply.status_code == 404 and reply.json()["error"]["type"] == "not_found_error"
    loaded = httpx.get(f"{one_model.url}/api/ps", timeout=60).json()["models"]
    assert [m["name"] for m in loaded] == [f"{smollm2.name}:latest"]
