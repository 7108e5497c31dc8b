"""Llama-shaped GGUF models with random weights and a real tokenizer, made where they run (nothing large is carried
to a lent GPU machine): the tokenizer's keys are copied from a GGUF (SmolLM2's, or a tokenizer-only copy of it,
``--tokenizer-only``), the weights are F16 noise (a block of normal values, N(0, 0.02), repeated: quick to write and
as costly to compute as trained weights), and a quantized copy is made with llama.cpp's llama-quantize.

The shapes are Llama 3.2 1B and 3B and Llama 3.1 8B (their layers, widths, heads and feed-forward sizes) with
SmolLM2's 49,152-token vocabulary, plus small ones for a CPU: ``tiny`` (4 layers, 256 wide) and ``135m`` (SmolLM2's).

Usage: python bench/random_gguf.py TOKENIZER.gguf OUT.gguf --shape 3b
       python bench/random_gguf.py SmolLM2.gguf tokenizer.gguf --tokenizer-only
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass(frozen=True)
class Shape:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    tied: bool = True  # the output layer is the token embedding's (Llama 3.2, SmolLM2); else a tensor of its own


SHAPES = {
    "tiny": Shape(4, 256, 4, 2, 768),
    "135m": Shape(30, 576, 9, 3, 1536),
    "1b": Shape(16, 2048, 32, 8, 8192),
    "3b": Shape(28, 3072, 24, 8, 8192),
    "8b": Shape(32, 4096, 32, 8, 14336, tied=False),
}
CONTEXT = 131072


def tokenizer_fields(path: Path) -> list[gguf.ReaderField]:
    reader = gguf.GGUFReader(path)
    return [f for f in reader.fields.values() if f.name.startswith("tokenizer.")]


def _copy_fields(writer: gguf.GGUFWriter, fields: list[gguf.ReaderField]) -> None:
    for field in fields:
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)


def write_tokenizer_only(source: Path, out: Path) -> None:
    """A GGUF of ``source``'s tokenizer keys and nothing else (a few MB), to carry in place of the model."""
    writer = gguf.GGUFWriter(out, "llama")
    _copy_fields(writer, tokenizer_fields(source))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()


def tensors(shape: Shape, n_vocab: int) -> list[tuple[str, tuple[int, ...], bool]]:
    """Each tensor's name, numpy shape (rows = output features) and whether it is a norm (F32 ones)."""
    head = shape.n_embd // shape.n_head
    out: list[tuple[str, tuple[int, ...], bool]] = [("token_embd.weight", (n_vocab, shape.n_embd), False)]
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (shape.n_embd,), True),
            (p + "attn_q.weight", (shape.n_head * head, shape.n_embd), False),
            (p + "attn_k.weight", (shape.n_head_kv * head, shape.n_embd), False),
            (p + "attn_v.weight", (shape.n_head_kv * head, shape.n_embd), False),
            (p + "attn_output.weight", (shape.n_embd, shape.n_head * head), False),
            (p + "ffn_norm.weight", (shape.n_embd,), True),
            (p + "ffn_gate.weight", (shape.n_ff, shape.n_embd), False),
            (p + "ffn_up.weight", (shape.n_ff, shape.n_embd), False),
            (p + "ffn_down.weight", (shape.n_embd, shape.n_ff), False),
        ]
    out.append(("output_norm.weight", (shape.n_embd,), True))
    if not shape.tied:
        out.append(("output.weight", (n_vocab, shape.n_embd), False))
    return out


def write_random(tokenizer: Path, out: Path, shape: Shape, seed: int = 0) -> None:
    """A llama model of ``shape`` with random F16 weights and ``tokenizer``'s vocabulary, written tensor by tensor
    (memory stays at one tensor)."""
    fields = tokenizer_fields(tokenizer)
    tokens = next(f for f in fields if f.name == "tokenizer.ggml.tokens")
    n_vocab = len(tokens.data)
    writer = gguf.GGUFWriter(out, "llama")
    writer.add_name(f"random-{out.stem}")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    _copy_fields(writer, fields)
    plan = tensors(shape, n_vocab)
    for name, dims, norm in plan:
        dtype = np.float32 if norm else np.float16
        n = int(np.prod(dims))
        writer.add_tensor_info(name, dims, np.dtype(dtype), n * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal(1 << 20) * 0.02).astype(np.float16)
    for _name, dims, norm in plan:
        n = int(np.prod(dims))
        start = int(rng.integers(0, block.size))
        data = np.ones(dims, np.float32) if norm else np.resize(np.roll(block, start), n).reshape(dims)
        writer.write_tensor_data(data)
    writer.close()


def quantize(llama_quantize: Path, source: Path, out: Path, kind: str = "Q4_K_M") -> None:
    threads = "0"  # llama-quantize's default: all cores
    subprocess.run([str(llama_quantize), str(source), str(out), kind, threads], check=True, capture_output=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tokenizer", type=Path, help="a GGUF whose tokenizer keys the model takes")
    p.add_argument("out", type=Path)
    p.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    p.add_argument("--tokenizer-only", action="store_true", help="write the tokenizer's keys alone to OUT")
    args = p.parse_args()
    if args.tokenizer_only:
        write_tokenizer_only(args.tokenizer, args.out)
    else:
        write_random(args.tokenizer, args.out, SHAPES[args.shape])
    print(f"{args.out}: {args.out.stat().st_size >> 20} MiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
