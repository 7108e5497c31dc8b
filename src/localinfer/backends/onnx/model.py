"""One onnxruntime-genai model and its tokenizer, opened on the execution provider asked for, else the CPU.

``onnxruntime_genai`` is imported only here, when a model is loaded: without it the backend is unavailable
with a reason, and importing localinfer never fails.
"""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

from localinfer.errors import ModelLoadError

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
INSTALL_HINT = "pip install 'localinfer[onnx]'"
# ONNX Runtime's provider names -> the names onnxruntime-genai's Config.append_provider takes
GENAI_PROVIDERS = {
    "CUDAExecutionProvider": "cuda",
    "DmlExecutionProvider": "dml",
    "CoreMLExecutionProvider": "CoreML",
    "OpenVINOExecutionProvider": "OpenVINO",
    "QNNExecutionProvider": "QNN",
    "WebGpuExecutionProvider": "WebGPU",
}


def import_genai() -> ModuleType:
    """The ``onnxruntime_genai`` module. Raises ModelLoadError (with the install hint) when it cannot be imported."""
    try:
        return importlib.import_module("onnxruntime_genai")
    except ImportError as exc:
        raise ModelLoadError(f"onnxruntime-genai is not available: {exc}", hint=INSTALL_HINT) from exc


class GenaiModel:
    """The loaded model, its tokenizer and the provider it really runs on. Tokenizing is safe from any thread;
    generators are created by the inference thread only."""

    def __init__(self, og: ModuleType, model: Any, provider: str) -> None:
        self.og = og
        self.model = model
        self.tokenizer = og.Tokenizer(model)
        self.provider = provider
        self.eos_ids = frozenset(int(t) for t in self.tokenizer.eos_token_ids)

    @classmethod
    def load(cls, folder: Path, provider: str | None, threads: int) -> GenaiModel:
        """Open the model in ``folder`` on ``provider`` (None: the CPU). A provider that fails to start is logged
        with its reason and the model is opened on the CPU instead. Raises ModelLoadError."""
        og = import_genai()
        if not (folder / "genai_config.json").is_file():
            raise ModelLoadError(
                f"{folder} is not an onnxruntime-genai model: it has no genai_config.json",
                hint="convert a model with 'localinfer convert MODEL --to onnx'",
            )
        wanted = provider or CPU
        if wanted != CPU:
            try:
                return cls(og, _open(og, folder, wanted, threads), wanted)
            except Exception as exc:  # onnxruntime-genai raises RuntimeError, or worse, for a provider it lacks
                log.warning("ONNX Runtime could not start %s (%s): running %s on the CPU", wanted, exc, folder.name)
        try:
            return cls(og, _open(og, folder, CPU, threads), CPU)
        except Exception as exc:
            raise ModelLoadError(
                f"onnxruntime-genai could not load {folder}: {exc}",
                hint="convert the model again with 'localinfer convert'",
            ) from exc

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer.encode(text)]

    def create_stream(self) -> Any:
        """An incremental detokenizer: ``decode(token)`` gives the text that token completes."""
        return self.tokenizer.create_stream()


def _open(og: ModuleType, folder: Path, provider: str, threads: int) -> Any:
    config = og.Config(str(folder))
    if threads > 0:
        options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
        config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    config.clear_providers()  # a model built for a GPU names its provider: the CPU is what is left without one
    if provider != CPU:
        config.append_provider(GENAI_PROVIDERS.get(provider, provider))
    return og.Model(config)
