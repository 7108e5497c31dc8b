"""What the planner needs to know about a model, read from its files before it is loaded: format, size, layers,
trained context, the key/value cache a token takes, and its multimodal projector's weights and compute buffer."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from localinfer.models.metadata.folder import cached_folder_facts, folder_format, weights_bytes

if TYPE_CHECKING:
    from localinfer.models.metadata.gguf import GGUFInfo

ModelFormat = Literal["gguf", "onnx", "hf"]
F16 = 2  # bytes per cached key or value element (llama.cpp's default cache type)


@dataclass(frozen=True)
class ModelProfile:
    """``kv_bytes_per_token``: keys and values of one token over all layers; ``None`` fields are unknown."""

    name: str
    format: ModelFormat
    size_bytes: int  # the weights
    n_layers: int | None = None
    context_train: int | None = None
    kv_bytes_per_token: int | None = None
    quantization: str | None = None
    projector_bytes: int = 0  # a multimodal projector's weights, loaded beside the model (llama.cpp's clip)
    projector_compute_bytes: int = 0  # and the compute buffer it reserves to encode an image

    @property
    def projector_total(self) -> int:
        """What the projector takes, on the device it goes to: its weights and its compute buffer."""
        return self.projector_bytes + self.projector_compute_bytes

    @property
    def layer_bytes(self) -> int:
        """Weights of one repeating layer; token embeddings and the output head count as about two more."""
        return self.size_bytes // ((self.n_layers or 1) + 2)

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        return (self.kv_bytes_per_token or 0) // (self.n_layers or 1)


def with_draft(model: ModelProfile, draft: ModelProfile) -> ModelProfile:
    """``model`` and the draft model that drafts for it, as the planner sees the two together: the draft's weights
    beside the model's, and its KV cache beside the model's in every slot, as long (DraftModel.load). Layers stay
    the model's, so a GPU layer is counted with its share of both."""
    kv = None
    if model.kv_bytes_per_token is not None or draft.kv_bytes_per_token is not None:
        kv = (model.kv_bytes_per_token or 0) + (draft.kv_bytes_per_token or 0)
    return replace(model, size_bytes=model.size_bytes + draft.size_bytes, kv_bytes_per_token=kv)


def with_projector(model: ModelProfile, weights: int, compute: int) -> ModelProfile:
    """``model`` with a multimodal projector of ``weights`` bytes that reserves ``compute`` bytes to encode."""
    return replace(model, projector_bytes=weights, projector_compute_bytes=compute)


def with_adapters(model: ModelProfile, adapter_bytes: int) -> ModelProfile:
    """``model`` with LoRA adapters of ``adapter_bytes`` loaded beside its weights (llama.cpp keeps them where the
    weights they adapt are, so a GPU layer is counted with its share of them)."""
    return replace(model, size_bytes=model.size_bytes + adapter_bytes) if adapter_bytes else model


def _kv_bytes(layers: int | None, kv_heads: int | None, key: int | None, value: int | None) -> int | None:
    """Bytes of f16 keys and values one token takes over all layers; None when a dimension is unknown."""
    if not (layers and kv_heads and key and value):
        return None
    return layers * kv_heads * (key + value) * F16


def from_gguf(name: str, info: GGUFInfo, size_bytes: int | None = None) -> ModelProfile:
    head = info.embedding_length // info.head_count if info.embedding_length and info.head_count else None
    kv = _kv_bytes(info.block_count, info.head_count_kv, info.key_length or head, info.value_length or head)
    return ModelProfile(
        name=name,
        format="gguf",
        size_bytes=size_bytes if size_bytes is not None else info.size_bytes,
        n_layers=info.block_count,
        context_train=info.context_length,
        kv_bytes_per_token=kv,
        quantization=info.quantization,
    )


def from_path(path: Path, name: str | None = None) -> ModelProfile:
    """A GGUF file, or an onnxruntime-genai or Hugging Face folder (the folder or its config file). Raises
    ModelLoadError for anything else, and for a folder whose config cannot be read."""
    name = name or path.stem
    if path.is_file() and folder_format(path) is None:
        from localinfer.models.metadata.gguf import cached_gguf_info  # gguf (and numpy) only for a GGUF

        return from_gguf(name, cached_gguf_info(path))
    facts = cached_folder_facts(path)
    folder = path.parent if path.is_file() else path
    return ModelProfile(
        name=name,
        format=facts.format,
        size_bytes=weights_bytes(folder, facts.format),
        n_layers=facts.block_count,
        context_train=facts.context_length,
        kv_bytes_per_token=_kv_bytes(facts.block_count, facts.head_count_kv, facts.head_length, facts.head_length),
        quantization=facts.quantization,
    )
