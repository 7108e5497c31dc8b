"""What the model listings say a model with a projector sees, without loading it: Ollama's ``/api/show`` (the
``vision`` and ``audio`` capabilities, ``projector_info``) through the official ollama client, and the
``multimodal`` capability of llama-server's ``/models`` list (and ``/v1/models``), and what the app's remote client
learns from them. The projectors are headers only
(tests/projector_gguf.py): nothing here loads them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from localinfer.client.remote import HttpClient
from localinfer.models.store import Manifest, ModelFile, ModelStore
from tests.app.server.conftest import Server, serving
from tests.projector_gguf import write_projector

pytestmark = pytest.mark.model


def with_projector(model: Manifest, name: str, projector: Path) -> Manifest:
    return dataclasses.replace(model, name=name, projector=ModelFile(projector, projector.stat().st_size, None))


@pytest.fixture(scope="module")
def server(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("vision-home")
    store = ModelStore(home / "models")
    sees = write_projector(home / "mmproj-sees.gguf", text_width=576)
    hears = write_projector(home / "mmproj-hears.gguf", text_width=576, audio=True)
    store.register(dataclasses.replace(smollm2, name="smollm2"))
    store.register(with_projector(smollm2, "smol-sees", sees))
    store.register(with_projector(smollm2, "smol-hears", hears))
    with serving("", home, tmp_path_factory.mktemp("serve-vision")) as running:
        yield running


def shown(server: Server, model: str) -> dict[str, Any]:
    answer = httpx.post(f"{server.url}/api/show", json={"model": model}, timeout=60)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_api_show_lists_vision_for_a_model_with_a_projector_and_audio_when_it_hears(server: Server) -> None:
    client = ollama.Client(host=server.url)
    assert client.show("smol-sees").capabilities == ["completion", "vision"]
    assert client.show("smol-hears").capabilities == ["completion", "vision", "audio"]
    assert client.show("smollm2").capabilities == ["completion"]


def test_api_show_gives_the_projectors_metadata_as_projector_info(server: Server) -> None:
    info = shown(server, "smol-sees")["projector_info"]
    assert info["general.architecture"] == "clip"
    assert info["clip.has_vision_encoder"] is True and info["clip.projector_type"] == "gemma3"
    assert info["clip.vision.embedding_length"] == 32 and info["clip.vision.projection_dim"] == 576
    assert info["general.parameter_count"] == 32 * 3 * 8 * 8 + 32 * 576
    assert "projector_info" not in shown(server, "smollm2")


def test_the_model_lists_say_multimodal_as_llama_server_does(server: Server) -> None:
    for path in ("/models", "/v1/models"):
        listed = httpx.get(f"{server.url}{path}", timeout=60).json()["models"]
        capabilities = {m["name"]: m["capabilities"] for m in listed}
        assert capabilities == {
            "smollm2": ["completion"],
            "smol-sees": ["completion", "multimodal"],
            "smol-hears": ["completion", "multimodal"],
        }


def test_the_apps_remote_client_learns_what_each_model_sees(server: Server) -> None:
    async def listed() -> dict[str, tuple[str, ...]]:
        client = HttpClient(server.url)
        try:
            return {m.name: m.modalities for m in await client.models()}
        finally:
            await client.close()

    assert asyncio.run(listed()) == {"smollm2": (), "smol-sees": ("vision",), "smol-hears": ("vision", "audio")}
