"""A LoRA adapter for SmolLM2, derived once into the test home: the same random numbers as llama.cpp's LoRA GGUF
(what ``--lora`` loads) and as a PEFT folder (``adapter_config.json`` + ``adapter_model.safetensors``, what
``localinfer convert --to gguf-lora`` reads).

Every layer's attention (q, k, v, output) and FFN (gate, up, down) weights get a rank-4 pair of small random A and
B matrices with alpha 8, from a fixed seed, large enough that SmolLM2's greedy text changes at scale 1. The GGUF
is written in llama.cpp's layout; the PEFT folder holds the same numbers in Hugging Face's, so the B matrices of
the query and key weights are stored with llama.cpp's rotary permutation undone (its converter permutes them back).
The files' names carry the base model's sha256 and this recipe's version: another base or recipe derives them again.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from localinfer.models.store import Manifest

RECIPE_VERSION = 1
RANK = 4
ALPHA = 8.0
A_STD = 0.05
B_STD = 0.05
# GGUF tensor -> the Hugging Face module PEFT names it by
TARGETS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


@dataclass(frozen=True)
class LoraFiles:
    gguf: Path  # llama.cpp's LoRA GGUF
    peft: Path  # the PEFT folder of the same numbers


def _heads(reader: gguf.GGUFReader) -> tuple[int, int, int]:
    def value(key: str) -> int:
        return int(reader.fields[key].contents())

    return value("llama.block_count"), value("llama.attention.head_count"), value("llama.attention.head_count_kv")


def _unpermute(rows: np.ndarray[Any, Any], n_head: int) -> np.ndarray[Any, Any]:
    """The inverse of llama.cpp's converter's query/key permutation: Hugging Face's row order."""
    shape = rows.shape
    undone: np.ndarray[Any, Any] = rows.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2)
    result: np.ndarray[Any, Any] = undone.reshape(shape)
    return result


def adapter_pairs(base: Path) -> dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """GGUF tensor name -> (A, B) in llama.cpp's layout (A: rank x inputs, B: outputs x rank), from the fixed seed."""
    reader = gguf.GGUFReader(base)
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}
    blocks, _, _ = _heads(reader)
    rng = np.random.default_rng(43)
    pairs = {}
    for block in range(blocks):
        for target in TARGETS:
            name = f"blk.{block}.{target}.weight"
            n_in, n_out = shapes[name][:2]
            a = rng.normal(0.0, A_STD, (RANK, n_in)).astype(np.float32)
            b = rng.normal(0.0, B_STD, (n_out, RANK)).astype(np.float32)
            pairs[name] = (a, b)
    return pairs


def write_gguf_adapter(base: Path, target: Path, pairs: dict[str, Any] | None = None) -> None:
    """The adapter as llama.cpp's LoRA GGUF (``pairs``: another set of pairs, to make a wrong adapter)."""
    writer = gguf.GGUFWriter(target, "llama")
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, ALPHA)
    for name, (a, b) in (pairs if pairs is not None else adapter_pairs(base)).items():
        writer.add_tensor(f"{name}.lora_a", a)
        writer.add_tensor(f"{name}.lora_b", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_safetensors(path: Path, tensors: dict[str, np.ndarray[Any, Any]]) -> None:
    """``tensors`` (float32) as a safetensors file: an 8-byte header length, the JSON header, the data."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        for array in tensors.values():
            fh.write(np.ascontiguousarray(array, dtype="<f4").tobytes())


def write_peft_folder(base: Path, folder: Path) -> None:
    """The same numbers as a PEFT folder, in Hugging Face's layout."""
    _, n_head, n_head_kv = _heads(gguf.GGUFReader(base))
    tensors = {}
    for name, (a, b) in adapter_pairs(base).items():
        _, block, target, _ = name.split(".")
        if target in ("attn_q", "attn_k"):
            b = _unpermute(b, n_head if target == "attn_q" else n_head_kv)
        module = f"base_model.model.model.layers.{block}.{TARGETS[target]}"
        tensors[f"{module}.lora_A.weight"] = a
        tensors[f"{module}.lora_B.weight"] = b
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "adapter_model.safetensors", tensors)
    config = {
        "peft_type": "LORA",
        "r": RANK,
        "lora_alpha": ALPHA,
        "target_modules": sorted({m.split(".")[1] for m in TARGETS.values()}),
        "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "bias": "none",
        "task_type": "CAUSAL_LM",
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))


def lora_files_once(base: Manifest, home: Path) -> LoraFiles:
    """The adapter's two forms in ``home``/lora, derived when missing (each written whole, then renamed)."""
    tag = f"{(base.files[0].sha256 or 'x')[:16]}-v{RECIPE_VERSION}"
    root = home / "lora"
    root.mkdir(parents=True, exist_ok=True)
    files = LoraFiles(root / f"smollm2-lora-{tag}.gguf", root / f"smollm2-peft-{tag}")
    if not files.gguf.is_file():
        partial = files.gguf.with_name(files.gguf.name + f".{os.getpid()}.partial")
        write_gguf_adapter(base.path, partial)
        os.replace(partial, files.gguf)
    if not (files.peft / "adapter_config.json").is_file():
        partial_dir = files.peft.with_name(files.peft.name + f".{os.getpid()}.partial")
        write_peft_folder(base.path, partial_dir)
        os.replace(partial_dir, files.peft)
    return files
