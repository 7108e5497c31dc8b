"""A small Hugging Face model folder written by hand, for what reads a folder's files without running the model:
a Qwen2-style ``config.json``, a ``tokenizer_config.json`` with a chat template, and a structurally real
``model.safetensors`` (bf16 tensors of the config's shapes, all zeros: 2,163,968 parameters, about 4.3 MB)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CONTEXT = 256, 2, 8, 2, 512, 4096, 32768
PARAMETERS = 2_163_968  # the elements of every tensor in SHAPES


def config() -> dict[str, Any]:
    """A config.json as transformers writes one for Qwen2 (token embeddings tied to the output head)."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": FFN,
        "max_position_embeddings": CONTEXT,
        "max_window_layers": LAYERS,
        "model_type": "qwen2",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": CONTEXT,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.43.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }


def shapes() -> dict[str, list[int]]:
    """The tensors of a Qwen2 model of ``config()``'s size (attention biases left out), name -> shape."""
    kv = HIDDEN // HEADS * KV_HEADS
    tensors = {"model.embed_tokens.weight": [VOCAB, HIDDEN], "model.norm.weight": [HIDDEN]}
    for i in range(LAYERS):
        layer = f"model.layers.{i}"
        tensors |= {
            f"{layer}.input_layernorm.weight": [HIDDEN],
            f"{layer}.post_attention_layernorm.weight": [HIDDEN],
            f"{layer}.self_attn.q_proj.weight": [HIDDEN, HIDDEN],
            f"{layer}.self_attn.k_proj.weight": [kv, HIDDEN],
            f"{layer}.self_attn.v_proj.weight": [kv, HIDDEN],
            f"{layer}.self_attn.o_proj.weight": [HIDDEN, HIDDEN],
            f"{layer}.mlp.gate_proj.weight": [FFN, HIDDEN],
            f"{layer}.mlp.up_proj.weight": [FFN, HIDDEN],
            f"{layer}.mlp.down_proj.weight": [HIDDEN, FFN],
        }
    return tensors


def write_safetensors(path: Path, tensors: Mapping[str, list[int]]) -> Path:
    """A valid safetensors file of zero-filled bf16 tensors: an 8-byte little-endian header length, the JSON
    header (padded with spaces to 8 bytes), then the data."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors.items():
        size = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.write(bytes(offset))
    return path


def write_hf_folder(folder: Path, *, chat_template: str | None = CHAT_TEMPLATE, config_text: str | None = None) -> Path:
    """``folder`` made a Hugging Face model folder; ``config_text`` replaces the config (to write a broken one)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(config_text if config_text is not None else json.dumps(config(), indent=2))
    tokenizer: dict[str, Any] = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": None}
    if chat_template is not None:
        tokenizer["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer, indent=2))
    write_safetensors(folder / "model.safetensors", shapes())
    return folder
