"""SmolLM2 stated as an embedding model: the embedding test model, derived once into the test home.

Neither test model is an embedding model (their GGUFs state no ``<arch>.pooling_type``), so nothing would show
that the pooling a GGUF states is the one used, or that /api/show calls such a model ``embedding``. This copies
SmolLM2's GGUF (every key and tensor, byte for byte) and adds ``llama.pooling_type = 3`` (last-token pooling, as
Qwen3-Embedding's GGUFs state it). The weights are SmolLM2's own: its vectors are the last token's hidden state,
where SmolLM2 itself is pooled by the mean of all of them, so for a causal model the mean of one text equals the
mean of the copy's vectors of each of its prefixes. The copy is registered as ``smollm2-embed``; its source names
the original's sha256 and this derivation's version, so a changed original derives it again.
"""

from __future__ import annotations

from pathlib import Path

from localinfer.models.store import Manifest, ModelStore
from tests.derived_gguf import architecture, copy_with_keys, derived_once

NAME = "smollm2-embed"
VERSION = 1
POOLING_LAST = 3  # llama.cpp's LLAMA_POOLING_TYPE_LAST


def write_pooling_copy(original: Path, target: Path, pooling: int = POOLING_LAST) -> None:
    """Write ``original`` to ``target`` with ``<arch>.pooling_type`` set to ``pooling``."""
    copy_with_keys(original, target, {f"{architecture(original)}.pooling_type": pooling})


def embedding_model_once(original: Manifest, store: ModelStore) -> Manifest:
    """The last-pooling copy of ``original`` registered in ``store`` as ``smollm2-embed``, derived when it is
    missing or was derived from another file or version."""
    return derived_once(
        original, store, NAME, f"pooling-last-v{VERSION}", lambda target: write_pooling_copy(original.path, target)
    )
