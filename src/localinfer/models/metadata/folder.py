"""What a folder model's config says about it, for ``show`` and model listings: an onnxruntime-genai folder's
``genai_config.json`` or a Hugging Face folder's ``config.json`` (and its safetensors headers), with the chat
template of the tokenizer files beside it. Weights are never read."""

from __future__ import annotations

import functools
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from localinfer.errors import ModelLoadError
from localinfer.models.metadata.hf import chat_template, read_json
from localinfer.models.store import HF_CONFIG, ONNX_CONFIG, is_hf_folder

FolderFormat = Literal["onnx", "hf"]
_MAX_SAFETENSORS_HEADER = 100_000_000  # a longer header means the file is not safetensors


@dataclass(frozen=True)
class FolderFacts:
    """What a model folder's config states; None where it does not.

    ``architecture`` is a Hugging Face config's ``architectures[0]`` (``Qwen2ForCausalLM``), else its
    ``model_type``; ``family`` its ``model_type`` (``qwen2``, as GGUF files name architectures). For ONNX both
    are ``genai_config.json``'s ``model.type``. Other names follow ``GGUFInfo``'s: ``block_count`` layers,
    ``embedding_length`` the hidden size, ``context_length`` the trained context. ``quantization`` is a Hugging
    Face config's ``quantization_config.quant_method`` (``awq``, ``fp8``), else its ``torch_dtype`` / ``dtype``
    (``bfloat16``); ONNX configs do not state one. ``parameters`` counts the elements of a Hugging Face folder's
    safetensors tensors (None for quantized or ONNX models, whose stored elements are not the parameters).
    """

    format: FolderFormat
    architecture: str | None
    family: str | None = None
    block_count: int | None = None
    context_length: int | None = None
    embedding_length: int | None = None
    head_count: int | None = None
    head_count_kv: int | None = None
    head_length: int | None = None  # elements of one attention head's key (and value)
    vocab_size: int | None = None
    quantization: str | None = None
    parameters: int | None = None
    chat_template: str | None = None

    @property
    def has_chat_template(self) -> bool:
        return self.chat_template is not None


def folder_format(path: Path) -> FolderFormat | None:
    """The format of the folder model at ``path`` (the folder or its config file), None when it is not one."""
    if path.name == ONNX_CONFIG or (path / ONNX_CONFIG).is_file():
        return "onnx"
    if path.name == HF_CONFIG or is_hf_folder(path):
        return "hf"
    return None


def read_folder_facts(path: Path) -> FolderFacts:
    """The facts of the folder model at ``path`` (the folder or its config file).

    Raises ModelLoadError when ``path`` is not a model folder or its config is missing, unreadable or not a JSON
    object. Tokenizer files that are missing or unreadable only mean no chat template.
    """
    fmt = folder_format(path)
    if fmt is None:
        raise ModelLoadError(
            f"{path} is not a model folder localinfer knows",
            hint=f"a model folder holds {ONNX_CONFIG} (ONNX) or {HF_CONFIG} and safetensors weights (Hugging Face)",
        )
    config_path = _config_path(path, fmt)
    folder = config_path.parent
    config = _read_config(config_path, fmt)
    template = chat_template(folder, read_json(folder / "tokenizer_config.json"))
    return _onnx(config, template) if fmt == "onnx" else _hf(folder, config, template)


def cached_folder_facts(path: Path) -> FolderFacts:
    """``read_folder_facts``, remembered per config file, size and mtime: listings read them on every call.
    Raises what ``read_folder_facts`` raises."""
    fmt = folder_format(path)
    try:
        stat = _config_path(path, fmt).stat() if fmt is not None else None
    except OSError:
        stat = None
    if stat is None:
        return read_folder_facts(path)  # raises ModelLoadError
    return _cached(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=1024)
def _cached(path: Path, size: int, mtime_ns: int) -> FolderFacts:
    return read_folder_facts(path)


def weights_bytes(folder: Path, fmt: FolderFormat) -> int:
    """Bytes of the weights in ``folder`` and below: ``.onnx`` and ``.data`` files of an ONNX model, ``.safetensors``
    files of a Hugging Face one, or ``.engine`` files of a built TensorRT-LLM engine (a Hugging Face format here)."""
    suffixes = (".onnx", ".data") if fmt == "onnx" else (".safetensors", ".engine")
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and f.suffix in suffixes)


def _config_path(path: Path, fmt: FolderFormat) -> Path:
    """The config file of the folder model at ``path`` (the folder or that file)."""
    name = ONNX_CONFIG if fmt == "onnx" else HF_CONFIG
    return path if path.name == name else path / name


def _read_config(path: Path, fmt: FolderFormat) -> dict[str, Any]:
    hint = (
        "convert the model again with 'localinfer convert', or 'localinfer rm' it"
        if fmt == "onnx"
        else f"check the folder's {HF_CONFIG}, or download the model again"
    )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path} cannot be read: {exc}", hint=hint) from exc
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path} is not a JSON object", hint=hint)
    return config


def _onnx(config: dict[str, Any], template: str | None) -> FolderFacts:
    model = _object(config.get("model"))
    decoder = _object(model.get("decoder"))
    return FolderFacts(
        format="onnx",
        architecture=_text(model.get("type")),
        family=_text(model.get("type")),
        block_count=_count(decoder.get("num_hidden_layers")),
        context_length=_count(model.get("context_length")),
        embedding_length=_count(decoder.get("hidden_size")),
        head_count=_count(decoder.get("num_attention_heads")),
        head_count_kv=_count(decoder.get("num_key_value_heads")),
        head_length=_count(decoder.get("head_size")),
        vocab_size=_count(model.get("vocab_size")),
        chat_template=template,
    )


def _hf(folder: Path, config: dict[str, Any], template: str | None) -> FolderFacts:
    text = _object(config.get("text_config"))  # multimodal models keep the language model's shape here

    def count(*keys: str) -> int | None:
        return next((n for key in keys for n in (_count(config.get(key)), _count(text.get(key))) if n), None)

    architectures = config.get("architectures")
    first = architectures[0] if isinstance(architectures, list) and architectures else None
    hidden, heads = count("hidden_size", "n_embd"), count("num_attention_heads", "n_head")
    quant_method = _text(_object(config.get("quantization_config")).get("quant_method"))
    return FolderFacts(
        format="hf",
        architecture=_text(first) or _text(config.get("model_type")),
        family=_text(config.get("model_type")),
        block_count=count("num_hidden_layers", "n_layer"),
        context_length=count("max_position_embeddings", "n_positions"),
        embedding_length=hidden,
        head_count=heads,
        head_count_kv=count("num_key_value_heads") or heads,
        head_length=count("head_dim") or (hidden // heads if hidden and heads else None),
        vocab_size=count("vocab_size"),
        quantization=quant_method or _text(config.get("torch_dtype")) or _text(config.get("dtype")),
        parameters=None if quant_method else _safetensors_parameters(folder),
        chat_template=template,
    )


def _safetensors_parameters(folder: Path) -> int | None:
    """Elements of every tensor in the folder's safetensors files (those its ``model.safetensors.index.json``
    maps, when it has one: some folders also hold a consolidated copy), from their headers; None when there are
    none or one cannot be read."""
    weight_map = _object(read_json(folder / "model.safetensors.index.json").get("weight_map"))
    files = sorted({folder / str(name) for name in weight_map.values()}) or sorted(folder.glob("*.safetensors"))
    total = 0
    try:
        for file in files:
            with file.open("rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                if length > _MAX_SAFETENSORS_HEADER:
                    return None
                header = json.loads(f.read(length))
            total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    except (OSError, ValueError, struct.error, TypeError, KeyError, AttributeError):
        return None
    return total or None


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
