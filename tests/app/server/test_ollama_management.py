"""Ollama's model-management API on a real ``localinfer serve``, driven by the official ``ollama`` client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import ollama
import pytest

from localinfer import __version__
from localinfer.app.server.app import create_app
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.store import Manifest, ModelStore
from tests.app.server.management import API_KEY, SERVED, SMOL_FILE, SMOL_REPO, ManagedServer, managed_server

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def managed(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedServer]:
    with managed_server(
        smollm2, tmp_path_factory.mktemp("ollama-management"), "--ctx-size", "512", "--threads", "1"
    ) as server:
        yield server


@pytest.fixture
def client(managed: ManagedServer) -> Iterator[ollama.Client]:
    c = ollama.Client(host=managed.url, headers=AUTH, timeout=120)
    try:
        yield c
    finally:
        c.close()  # type: ignore[no-untyped-call]


def names(client: ollama.Client) -> list[str]:
    """The names listed, without the ``:latest`` tag Ollama's listings carry."""
    listed = [m.model or "" for m in client.list().models]
    assert all(":" in name.rsplit("/", 1)[-1] for name in listed), listed
    return [name.removesuffix(":latest") for name in listed]


@pytest.mark.model
def test_version_is_an_ollama_release_copilot_accepts_and_names_localinfers(managed: ManagedServer) -> None:
    reply = httpx.get(f"{managed.url}/api/version", headers=AUTH)
    assert reply.status_code == 200
    assert reply.json() == {"version": "0.12.6", "localinfer": __version__}


@pytest.mark.model
def test_tags_list_the_served_model_in_ollamas_shape(
    managed: ManagedServer, client: ollama.Client, smollm2: Manifest
) -> None:
    raw = httpx.get(f"{managed.url}/api/tags", headers=AUTH).json()
    entry = next(m for m in raw["models"] if m["name"] == f"{SERVED}:latest")
    assert set(entry) == {"name", "model", "modified_at", "size", "digest", "details"}
    assert entry["details"]["families"] is None
    datetime.fromisoformat(entry["modified_at"])  # RFC 3339

    model = next(m for m in client.list().models if m.model == f"{SERVED}:latest")
    assert model.size == smollm2.size
    assert model.digest == smollm2.files[0].sha256  # the store's blob is named by its sha256
    assert model.details is not None
    assert model.details.format == "gguf"
    assert model.details.family == "llama"
    assert model.details.quantization_level == "Q4_1"
    assert model.details.parameter_size  # the file's size label


@pytest.mark.model
def test_ps_shows_the_loaded_model_with_its_context(client: ollama.Client, smollm2: Manifest) -> None:
    (running,) = client.ps().models
    assert running.name == running.model == f"{SERVED}:latest"
    assert running.context_length == 512
    assert running.size is not None and running.size > 0
    assert running.size_vram is not None and 0 <= running.size_vram <= running.size
    assert running.expires_at is not None and running.expires_at > datetime.now(timezone.utc)
    assert running.details is not None and running.details.quantization_level == "Q4_1"
    assert running.digest == smollm2.files[0].sha256


@pytest.mark.model
def test_pull_streams_progress_then_the_model_is_listed_and_delete_removes_it(
    managed: ManagedServer, client: ollama.Client
) -> None:
    progress = list(client.pull(SMOL_REPO, stream=True))

    assert progress[0].status == f"pulling manifest of {SMOL_REPO}"
    downloading = [p for p in progress if p.total and p.digest]
    assert downloading, [p.status for p in progress]
    assert all(p.digest and p.digest.startswith("sha256:") for p in downloading)
    assert downloading[-1].completed == downloading[-1].total
    assert progress[-1].model_dump(exclude_none=True) == {"status": "success"}
    assert [p.status for p in progress].count("success") == 1
    assert SMOL_REPO in names(client)
    pulled = managed.store.get(SMOL_REPO)
    assert pulled is not None and pulled.path.exists()

    assert client.delete(SMOL_REPO).status == "success"

    assert SMOL_REPO not in names(client)
    assert managed.store.get(SMOL_REPO) is None
    assert not pulled.path.exists()  # downloaded by localinfer into the HF cache: deleted with the model
    with pytest.raises(ollama.ResponseError) as missing:
        client.delete(SMOL_REPO)
    assert missing.value.status_code == 404
    assert f"model '{SMOL_REPO}' not found" in missing.value.error


@pytest.mark.model
def test_pull_without_streaming_answers_once_and_legacy_name_works(
    managed: ManagedServer, client: ollama.Client
) -> None:
    reply = client.pull(SMOL_REPO, stream=False)
    assert reply.model_dump(exclude_none=True) == {"status": "success"}
    assert SMOL_REPO in names(client)

    listed = f"{SMOL_REPO}:latest"  # the name as /api/tags gives it, which Open WebUI sends back
    deleted = httpx.request("DELETE", f"{managed.url}/api/delete", json={"name": listed}, headers=AUTH)
    assert deleted.status_code == 200 and deleted.content == b""
    assert SMOL_REPO not in names(client)


@pytest.mark.model
def test_a_pull_that_fails_mid_stream_ends_with_an_error_line(managed: ManagedServer, client: ollama.Client) -> None:
    with httpx.stream(
        "POST", f"{managed.url}/api/pull", json={"model": "nobody/missing-GGUF"}, headers=AUTH, timeout=60
    ) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in reply.iter_lines()]
    assert lines[0] == {"status": "pulling manifest of nobody/missing-GGUF"}
    assert set(lines[-1]) == {"error"} and "there is no repository nobody/missing-GGUF" in lines[-1]["error"]

    with pytest.raises(ollama.ResponseError) as failed:
        list(client.pull("nobody/missing-GGUF", stream=True))
    assert "there is no repository nobody/missing-GGUF" in failed.value.error


@pytest.mark.model
def test_a_pull_that_cannot_start_is_an_http_error(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as failed:
        list(client.pull("not a model", stream=True))
    assert failed.value.status_code == 400
    assert failed.value.error.startswith("'not a model' is not a model reference")
    assert "; use org/repo" in failed.value.error  # the hint


@pytest.mark.model
def test_a_json_body_sent_as_curl_d_sends_it_is_read(managed: ManagedServer) -> None:
    """Ollama's docs use ``curl -d '{...}'``, which labels the JSON a form; Ollama reads it anyway, and so do we."""
    form = {**AUTH, "content-type": "application/x-www-form-urlencoded"}
    missing = httpx.request("DELETE", f"{managed.url}/api/delete", content=b'{"model": "nope"}', headers=form)
    assert missing.status_code == 404
    assert missing.json()["error"].startswith("model 'nope' not found")
    bad = httpx.post(f"{managed.url}/api/pull", content=b'{"model": "not a model", "stream": false}', headers=form)
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("'not a model' is not a model reference")


@pytest.mark.model
def test_errors_on_api_routes_are_in_ollamas_shape(managed: ManagedServer) -> None:
    url = managed.url
    unauthorized = httpx.get(f"{url}/api/tags")
    assert unauthorized.status_code == 401
    assert unauthorized.json() == {
        "error": "missing or wrong API key; send the header 'Authorization: Bearer <key>' with the server's key"
    }
    wrong_type = httpx.post(f"{url}/api/pull", json={"model": 5}, headers=AUTH)
    assert wrong_type.status_code == 400
    assert wrong_type.json() == {"error": "model: Input should be a valid string"}
    no_model = httpx.post(f"{url}/api/pull", json={}, headers=AUTH)
    assert (no_model.status_code, no_model.json()) == (400, {"error": "model is required"})
    json_header = {**AUTH, "content-type": "application/json"}
    not_json = httpx.request("DELETE", f"{url}/api/delete", content=b"{", headers=json_header)
    assert not_json.status_code == 400
    assert not_json.json()["error"].startswith("the request body is not valid JSON: EOF while parsing")
    missing = httpx.request("DELETE", f"{url}/api/delete", json={"model": "nope"}, headers=AUTH)
    assert missing.status_code == 404
    assert missing.json()["error"].startswith("model 'nope' not found; ")
    # the OpenAI routes keep OpenAI's shape
    openai_shaped = httpx.post(f"{url}/v1/chat/completions", json={"model": 5}, headers=AUTH)
    assert set(openai_shaped.json()["error"]) == {"message", "type", "param", "code"}


def test_without_a_client_model_management_is_503(tmp_path: Path) -> None:
    async def scenario() -> None:
        settings = Settings(home=tmp_path)
        app = create_app(Engine(settings, ModelStore(settings.models_dir)))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as http:
            for method, path in [("GET", "/api/tags"), ("GET", "/api/ps"), ("POST", "/api/pull")]:
                reply = await http.request(method, path, json={"model": SMOL_FILE})
                assert reply.status_code == 503
                assert reply.json() == {"error": "model management is not available on this server"}
            assert (await http.get("/api/version")).json()["localinfer"] == __version__

    asyncio.run(scenario())
