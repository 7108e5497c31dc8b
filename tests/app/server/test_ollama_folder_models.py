"""Ollama's /api/tags and /api/ps describe folder models from their configs: an ONNX folder as ``onnx``, a Hugging
Face folder as ``safetensors``, each with its architecture as the family, beside GGUF files read from their headers.

The app runs in-process (the official ``ollama`` client over an ASGI transport); "loading" a model is a stand-in
backend's, so no engine runs and the GGUF reader is never pointed at a folder's files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import ollama
import pytest

from localinfer.app.server.app import create_app
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.library import ModelLibrary
from localinfer.models.store import Manifest, ModelStore, hf_manifest, local_manifest
from tests.conftest import MakeGGUF
from tests.hf_folder import write_hf_folder
from tests.idle_backend import IdleBackend

GPU_LAYERS = 1  # what the stand-in says it offloaded


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ollama.AsyncClient, Engine, ModelStore]]:
    """An in-process app over an engine with the stand-in backend and an empty store (discovery off)."""
    settings = Settings(home=tmp_path / "home", discover=False)
    library = ModelLibrary(ModelStore(settings.models_dir), None)
    engine = Engine(settings, library, lambda: IdleBackend(gpu_layers=GPU_LAYERS))
    app = create_app(engine, client=LocalClient(engine, library, settings))
    client = ollama.AsyncClient(host="http://localhost", transport=httpx.ASGITransport(app=app))
    try:
        yield client, engine, library.store
    finally:
        await engine.close()


def in_place(manifest: Manifest, name: str) -> Manifest:
    """``manifest`` under another name, its files not owned (so nothing here could ever delete them)."""
    files = tuple(dataclasses.replace(f, owned=False) for f in manifest.files)
    return dataclasses.replace(manifest, name=name, files=files)


async def test_tags_describe_a_hugging_face_folder_as_safetensors_beside_a_gguf_file(
    served: tuple[ollama.AsyncClient, Engine, ModelStore], tmp_path: Path, make_gguf: MakeGGUF
) -> None:
    client, _, store = served
    store.register(hf_manifest(write_hf_folder(tmp_path / "qwen-tiny")))
    store.register(local_manifest(make_gguf("tiny.gguf", arch="llama")))

    models = {(m.model or "").removesuffix(":latest"): m for m in (await client.list()).models}

    qwen = models["qwen-tiny"].details
    assert qwen is not None
    assert qwen.model_dump() == {
        "parent_model": "",
        "format": "safetensors",
        "family": "qwen2",
        "families": None,
        "parameter_size": "2M",  # 2,163,968 parameters, from the safetensors header
        "quantization_level": "bfloat16",
    }
    tiny = models["tiny"].details
    assert tiny is not None
    assert (tiny.format, tiny.family, tiny.quantization_level) == ("gguf", "llama", "Q8_0")


async def test_ps_describes_a_loaded_hugging_face_folder_with_its_layers(
    served: tuple[ollama.AsyncClient, Engine, ModelStore], tmp_path: Path
) -> None:
    client, engine, store = served
    manifest = hf_manifest(write_hf_folder(tmp_path / "qwen-tiny"))
    store.register(manifest)
    await engine.preload(manifest).ready

    (running,) = (await client.ps()).models

    assert running.model == "qwen-tiny:latest"
    assert running.details is not None
    assert (running.details.format, running.details.family, running.details.parameter_size) == (
        "safetensors",
        "qwen2",
        "2M",
    )
    assert running.size == manifest.size
    assert running.size_vram == manifest.size * GPU_LAYERS // 3  # 2 layers in config.json, and the output layer
    assert running.context_length == 1024


async def test_a_folder_whose_config_is_broken_is_listed_with_what_is_known(
    served: tuple[ollama.AsyncClient, Engine, ModelStore], tmp_path: Path
) -> None:
    client, _, store = served
    store.register(hf_manifest(write_hf_folder(tmp_path / "broken", config_text="{not json")))

    (model,) = (await client.list()).models

    assert model.model == "broken:latest"
    assert model.details is not None
    assert (model.details.format, model.details.family, model.details.parameter_size) == ("safetensors", "", "")


@pytest.mark.model
async def test_tags_and_ps_describe_an_onnx_folder_from_its_genai_config(
    served: tuple[ollama.AsyncClient, Engine, ModelStore], smollm2_onnx: Manifest
) -> None:
    client, engine, store = served
    manifest = in_place(smollm2_onnx, "smol-onnx")
    store.register(manifest)

    (listed,) = (await client.list()).models
    assert listed.model == "smol-onnx:latest"
    assert listed.size == smollm2_onnx.size
    assert listed.details is not None
    assert listed.details.model_dump() == {
        "parent_model": "",
        "format": "onnx",
        "family": "llama",
        "families": None,
        "parameter_size": "",  # an ONNX folder does not say
        "quantization_level": "int8",  # the converted model's manifest does
    }

    await engine.preload(manifest).ready
    (running,) = (await client.ps()).models
    assert running.details is not None and running.details.model_dump() == listed.details.model_dump()
    assert running.size_vram == smollm2_onnx.size * GPU_LAYERS // 31  # 30 layers in genai_config.json, and the output
