"""The engine serves each model on the backend its format maps to: GGUF on llama.cpp, ONNX on ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from localinfer.backends.base import Backend, Capabilities, LoadSpec, ModelFacts, SlotUsage
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.onnx.backend import OnnxBackend
from localinfer.config import Settings
from localinfer.engine.backends import DEFAULT_BACKENDS, backend_for
from localinfer.engine.engine import Engine
from localinfer.errors import ModelLoadError
from localinfer.models.store import Manifest, ModelFile, ModelStore
from localinfer.types import GenerationRequest, TokenStream


class Recording(Backend):
    """A backend that loads instantly and remembers what it was given."""

    name = "recording"
    capabilities = Capabilities(formats=("gguf", "onnx"))

    def __init__(self, label: str) -> None:
        self.label = label
        self.spec: LoadSpec | None = None

    async def load(self, spec: LoadSpec) -> None:
        self.spec = spec

    @property
    def facts(self) -> ModelFacts:
        return ModelFacts(512, 512, None, "", "", False, True, self.label, 0)

    async def generate(self, request: GenerationRequest) -> TokenStream:
        raise AssertionError("not used")
        yield  # pragma: no cover

    async def unload(self) -> None:
        return None

    def slot_usage(self) -> SlotUsage:
        return SlotUsage()


def manifest(name: str, fmt: str, path: Path) -> Manifest:
    return Manifest(name, f"file:{path}", fmt, (ModelFile(path, 0, None),), None, 0)


def test_the_default_table_maps_gguf_to_llamacpp_and_onnx_to_onnx_runtime(tmp_path: Path) -> None:
    assert isinstance(backend_for(manifest("a", "gguf", tmp_path / "a.gguf"), DEFAULT_BACKENDS), LlamaCppBackend)
    assert isinstance(backend_for(manifest("b", "onnx", tmp_path / "b"), DEFAULT_BACKENDS), OnnxBackend)


def test_a_format_no_backend_serves_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no backend here serves hf models"):
        backend_for(manifest("c", "hf", tmp_path / "c"), DEFAULT_BACKENDS)


async def test_the_engine_picks_each_models_backend_by_its_format(tmp_path: Path) -> None:
    gguf, onnx = manifest("g", "gguf", tmp_path / "g.gguf"), manifest("o", "onnx", tmp_path / "o" / "genai_config.json")
    settings = Settings(home=tmp_path, discover=False)
    table = {"gguf": lambda: Recording("gguf"), "onnx": lambda: Recording("onnx")}
    engine = Engine(settings, ModelStore(settings.models_dir), table)
    for m in (gguf, onnx):
        await engine.preload(m).ready
    assert {m.name: m.facts.architecture for m in engine.loaded()} == {"g": "gguf", "o": "onnx"}
    await engine.close()


async def test_one_factory_still_serves_every_format(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, discover=False)
    engine = Engine(settings, ModelStore(settings.models_dir), lambda: Recording("any"))
    await engine.preload(manifest("o", "onnx", tmp_path / "o" / "genai_config.json")).ready
    assert [m.facts.architecture for m in engine.loaded()] == ["any"]
    await engine.close()
