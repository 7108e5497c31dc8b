"""What the planner needs to know about a model, read from its files before it is loaded: format, size, layers,
trained context and the key/value cache a token takes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from localinfer.errors import ModelLoadError
from localinfer.models.gguf import GGUFInfo, cached_gguf_info

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

    @property
    def layer_bytes(self) -> int:
        """Weights of one repeating layer; token embeddings and the output head count as about two more."""
        return self.size_bytes // ((self.n_layers or 1) + 2)

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        return (self.kv_bytes_per_token or 0) // (self.n_layers or 1)


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
    """A GGUF file, an onnxruntime-genai folder (``genai_config.json``) or a Hugging Face folder (``config.json``
    with safetensors). Raises ModelLoadError for anything else."""
    name = name or path.stem
    if path.is_file():
        return from_gguf(name, cached_gguf_info(path))
    if (path / "genai_config.json").is_file():
        return _from_onnx(name, path)
    if (path / "config.json").is_file():
        return _from_hf(name, path)
    raise ModelLoadError(
        f"{path} is not a model localinfer knows", hint="pass a .gguf file, an ONNX (genai) folder or a HF folder"
    )


def _folder_bytes(path: Path, suffixes: tuple[str, ...]) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.suffix in suffixes)


def _from_onnx(name: str, path: Path) -> ModelProfile:
    model: dict[str, Any] = json.loads((path / "genai_config.json").read_text()).get("model", {})
    decoder: dict[str, Any] = model.get("decoder", {})
    layers = decoder.get("num_hidden_layers")
    head = decoder.get("head_size")
    kv = _kv_bytes(layers, decoder.get("num_key_value_heads"), head, head)
    return ModelProfile(
        name=name,
        format="onnx",
        size_bytes=_folder_bytes(path, (".onnx", ".data")),
        n_layers=layers,
        context_train=model.get("context_length"),
        kv_bytes_per_token=kv,
    )


def _from_hf(name: str, path: Path) -> ModelProfile:
    config: dict[str, Any] = json.loads((path / "config.json").read_text())
    layers = config.get("num_hidden_layers")
    heads = config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads", heads)
    head = config.get("head_dim") or (config["hidden_size"] // heads if heads and config.get("hidden_size") else None)
    kv = _kv_bytes(layers, kv_heads, head, head)
    return ModelProfile(
        name=name,
        format="hf",
        size_bytes=_folder_bytes(path, (".safetensors", ".bin")),
        n_layers=layers,
        context_train=config.get("max_position_embeddings"),
        kv_bytes_per_token=kv,
    )
