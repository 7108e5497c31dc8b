"""A PEFT LoRA folder (``adapter_config.json`` + ``adapter_model.safetensors``) as llama.cpp's LoRA GGUF, the file
``--lora`` loads, written with the ``gguf`` package as llama.cpp's ``convert_lora_to_gguf.py`` writes it.

The base model is a GGUF here (llama.cpp's converter reads the Hugging Face folder's config instead): its
architecture, block count and heads come from its metadata, and each adapter pair is checked against the shape of
the base tensor it adapts, as llama.cpp checks it when it loads the adapter, so a wrong base is refused here, in
one line, rather than at load. Each ``...<module>.lora_A.weight`` / ``lora_B.weight`` pair becomes
``<gguf tensor>.weight.lora_a`` / ``.lora_b`` (A: rank x inputs, B: outputs x rank, as stored), with the keys
``general.type = adapter``, ``adapter.type = lora`` and ``adapter.lora.alpha``; llama.cpp scales B·A by
alpha / rank, as PEFT does. Where llama.cpp's converter permutes the query and key weights of a ``llama`` model
(its rotary layout), the rows of their B matrices are permuted the same way. rsLoRA's alpha / sqrt(rank) is
written as the alpha that gives it; per-module ranks or alphas, DoRA and adapted embeddings are refused.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from localinfer.errors import ConvertError

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
# architectures whose query and key weights llama.cpp's converter permutes (LlamaModel.permute), and those it
# writes as they are; the adapters of others are refused rather than written possibly wrong
PERMUTED_QK = frozenset({"llama"})
AS_STORED = frozenset({"qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "mistral3", "olmo2"})
_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
_MAX_HEADER = 100_000_000


@dataclass(frozen=True)
class ConvertedLora:
    path: Path
    architecture: str
    rank: int
    alpha: float
    pairs: int  # adapted tensors (each a lora_a and a lora_b)


def _fail(message: str, hint: str = "") -> ConvertError:
    return ConvertError(message, hint=hint or "give a PEFT LoRA folder and the GGUF model it was trained on")


def read_safetensors(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    """Every tensor of a safetensors file as float32 arrays (F32, F16, BF16 and F64 stored). Raises
    ConvertError for a file that is not safetensors or holds another element type."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        size = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
        if not 0 < size < _MAX_HEADER:
            raise _fail(f"{path} is not a safetensors file")
        try:
            header = json.loads(fh.read(size))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise _fail(f"{path} is not a safetensors file (its header is not JSON)") from None
        data = fh.read()
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        chunk = data[start:end]
        if info["dtype"] == "BF16":
            array = (np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in _DTYPES:
            array = np.frombuffer(chunk, dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")).astype(np.float32)
        else:
            raise _fail(f"{path}: tensor {name} is {info['dtype']}; LoRA weights are floats (F32, F16, BF16)")
        tensors[name] = array.reshape(info["shape"])
    return tensors


def _config(folder: Path) -> tuple[int, float]:
    """The folder's rank and the alpha llama.cpp needs. Raises ConvertError for what it cannot express."""
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(f"{folder} has no {CONFIG}: not a PEFT adapter folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(f"cannot read {folder / CONFIG}: {exc}") from None
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise _fail(f"{folder} holds a {config.get('peft_type')} adapter; only LoRA converts to llama.cpp's GGUF")
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            raise _fail(f"{CONFIG} sets {key}: one rank and alpha for every module is all llama.cpp's format holds")
    if config.get("use_dora"):
        raise _fail("a DoRA adapter (use_dora) has no form in llama.cpp's LoRA GGUF")
    rank, alpha = int(config.get("r", 8)), float(config.get("lora_alpha", 8))
    if config.get("use_rslora"):
        alpha *= math.sqrt(rank)  # llama.cpp scales by alpha / rank; rsLoRA by lora_alpha / sqrt(rank)
    return rank, alpha


def _permute(rows: np.ndarray[Any, Any], n_head: int) -> np.ndarray[Any, Any]:
    """llama.cpp's converter's permutation of a llama query or key weight's rows (output features), for B."""
    shape = rows.shape
    permuted: np.ndarray[Any, Any] = rows.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2)
    result: np.ndarray[Any, Any] = permuted.reshape(shape)
    return result


def _base_tensors(base: Path) -> tuple[str, int, dict[str, str], dict[str, tuple[int, ...]]]:
    """The base GGUF's architecture, block count, heads (``n_head``, ``n_head_kv``) and tensor shapes (ggml
    order)."""
    try:
        reader = gguf.GGUFReader(base)
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot read the base model {base} as a GGUF: {exc}") from None
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())

    def field(key: str) -> Any:
        found = reader.fields.get(key.format(arch=arch))
        return found.contents() if found is not None else None

    blocks = int(field(gguf.Keys.LLM.BLOCK_COUNT) or 0)
    heads = {
        "n_head": str(field(gguf.Keys.Attention.HEAD_COUNT)),
        "n_head_kv": str(field(gguf.Keys.Attention.HEAD_COUNT_KV)),
    }
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}
    return arch, blocks, heads, shapes


def convert_peft_lora(folder: Path, base: Path, out: Path, *, outtype: str = "f32") -> ConvertedLora:
    """Write ``folder``'s PEFT LoRA as llama.cpp's LoRA GGUF at ``out`` (whole or not at all), for the GGUF model
    ``base``. ``outtype``: f32 (llama.cpp's converter's default) or f16. Raises ConvertError naming what is
    wrong: not a PEFT folder, an architecture or tensor it cannot map, a shape that is not the base model's."""
    rank, alpha = _config(folder)
    if not (folder / WEIGHTS).is_file():
        raise _fail(f"{folder} has no {WEIGHTS}", hint="save the adapter with safe_serialization (the default)")
    arch, blocks, heads, shapes = _base_tensors(base)
    if arch not in PERMUTED_QK | AS_STORED:
        raise _fail(
            f"adapters of {arch} models are not converted here (its weights' layout in GGUF is not known to match)",
            hint="use llama.cpp's convert_lora_to_gguf.py",
        )
    names = gguf.get_tensor_name_map(next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch), blocks)
    pairs: dict[str, dict[str, np.ndarray[Any, Any]]] = {}
    for name, array in read_safetensors(folder / WEIGHTS).items():
        part = "a" if ".lora_A." in name else "b" if ".lora_B." in name else ""
        if not part:
            raise _fail(f"{WEIGHTS}: {name} is not a lora_A or lora_B weight (modules_to_save are not converted)")
        hf_name = name.replace("base_model.model.", "", 1).replace(f".lora_{part.upper()}.weight", ".weight")
        target = names.get_name(hf_name, try_suffixes=(".weight",))
        if target is None or target.startswith(("token_embd", "output.")) or target == "output.weight":
            raise _fail(
                f"{WEIGHTS}: {name} adapts no tensor of {base.name} ({arch}, {blocks} blocks) that llama.cpp adapts",
                hint="give the base model the adapter was trained on (embeddings and the output layer are not "
                "converted)",
            )
        pairs.setdefault(target, {})[part] = array
    if not pairs:
        raise _fail(f"{folder / WEIGHTS} holds no LoRA weights")
    dtype = {"f32": np.float32, "f16": np.float16}[outtype]
    writer_rows: list[tuple[str, np.ndarray[Any, Any]]] = []
    for target, pair in sorted(pairs.items()):
        if set(pair) != {"a", "b"}:
            raise _fail(f"{WEIGHTS}: the LoRA pair of {target} lacks its lora_{'B' if 'a' in pair else 'A'}")
        a, b = pair["a"], pair["b"]
        base_shape = shapes.get(target)
        if base_shape is None:
            raise _fail(f"{base.name} has no tensor {target}", hint="give the base model the adapter was trained on")
        n_in, n_out = base_shape[0], base_shape[1] if len(base_shape) > 1 else 1
        if a.shape[1] != n_in or b.shape[0] != n_out or a.shape[0] != b.shape[1]:
            raise _fail(
                f"{target}: the adapter's A {list(a.shape)} and B {list(b.shape)} do not fit the base model's "
                f"{n_out}x{n_in} weight",
                hint="give the base model the adapter was trained on",
            )
        if arch in PERMUTED_QK and target.endswith(("attn_q.weight", "attn_k.weight")):
            b = _permute(b, int(heads["n_head" if "attn_q" in target else "n_head_kv"]))
        writer_rows += [(f"{target}.lora_a", a.astype(dtype)), (f"{target}.lora_b", b.astype(dtype))]
    partial = out.with_name(out.name + ".partial")
    try:
        writer = gguf.GGUFWriter(partial, arch)
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        for name, array in writer_rows:
            writer.add_tensor(name, np.ascontiguousarray(array))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(partial, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise _fail(f"cannot write {out}: {exc}", hint="check the folder is writable, or give --outfile") from None
    return ConvertedLora(out, arch, rank, alpha, len(pairs))
