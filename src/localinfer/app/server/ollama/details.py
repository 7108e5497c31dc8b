"""What Ollama's listings say about a model (``details``), from its files: a GGUF header or a folder's config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localinfer.errors import LocalInferError
from localinfer.models.metadata import FolderFacts, GGUFInfo, cached_folder_facts, cached_gguf_info
from localinfer.types import OLLAMA_FORMAT_NAMES, ModelInfo


def model_details(info: ModelInfo | None, facts: GGUFInfo | FolderFacts | None) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": OLLAMA_FORMAT_NAMES.get(info.format, info.format) if info is not None else "",
        "family": _family(facts),
        "families": None,
        "parameter_size": _parameter_size(facts),
        "quantization_level": (info.quantization if info is not None else None)
        or (facts.quantization if facts is not None else None)
        or "",
    }


def _family(facts: GGUFInfo | FolderFacts | None) -> str:
    """The architecture as GGUF files name it (``llama``, ``qwen2``); ``""`` when unknown."""
    if isinstance(facts, FolderFacts):
        return facts.family or facts.architecture or ""
    return facts.architecture if facts is not None else ""


def _parameter_size(facts: GGUFInfo | FolderFacts | None) -> str:
    """``135M``, ``7.6B``: a GGUF file's size label, else the parameter count; ``""`` when neither is known."""
    if facts is None:
        return ""
    if isinstance(facts, GGUFInfo) and facts.size_label:
        return facts.size_label
    if not facts.parameters:
        return ""
    if facts.parameters >= 1_000_000_000:
        return f"{facts.parameters / 1e9:.1f}B"
    return f"{facts.parameters / 1e6:.0f}M"


def read_facts(info: ModelInfo) -> GGUFInfo | FolderFacts | None:
    """What the model's files say (a GGUF header, or a folder's config); None when they cannot be read."""
    if not info.path:
        return None
    model = Path(info.path)
    try:
        return cached_gguf_info(model) if info.format == "gguf" else cached_folder_facts(model)
    except (LocalInferError, OSError):
        return None
