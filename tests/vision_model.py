"""A vision projector for SmolLM2: the test projector, derived once into the test home.

No vision model can be downloaded here, so this writes a random-weight ``gemma3``-type mmproj (a SigLIP encoder
and Gemma 3's pooling projector, as llama.cpp's clip loader reads them) whose output width is SmolLM2's (576):
llama.cpp's mtmd loads it with SmolLM2 as the text model, and llama-server ``--mmproj`` does too. The encoder is
one layer 32 wide over 32-pixel images cut in 8-pixel patches (4 x 4 patches), pooled 2 x 2: each image is 4
tokens, and the file about 140 KB. What the model writes after such an image means nothing; what the tests
assert is that localinfer builds the same prompt and embeddings as llama-server from the same two files.

The weights come from a fixed seed, so the file is the same wherever it is written; its name carries the
layout's version, so a changed layout writes a new one.
"""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np

LAYOUT_VERSION = 1
TEXT_WIDTH = 576  # SmolLM2-135M's n_embd: the projector's output width must be the text model's
WIDTH = 32
FEED_FORWARD = 64  # not the width: llama.cpp swaps up and down of gemma3 layers whose down's first dim is the width
HEADS = 2
IMAGE_SIZE = 32
PATCH_SIZE = 8
SCALE_FACTOR = 2  # gemma3's pooling kernel: 4 x 4 patches pooled to 2 x 2
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH_SIZE // SCALE_FACTOR) ** 2


def write_projector(target: Path, *, text_width: int = TEXT_WIDTH, seed: int = 40) -> None:
    """Write the test projector to ``target`` (its output ``text_width`` wide)."""
    rng = np.random.default_rng(seed)

    def weights(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    writer = gguf.GGUFWriter(target, "clip")
    writer.add_string("general.name", "localinfer test projector")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_text_encoder", False)
    writer.add_string("clip.projector_type", "gemma3")
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.embedding_length", WIDTH)
    writer.add_uint32("clip.vision.feed_forward_length", FEED_FORWARD)
    writer.add_uint32("clip.vision.block_count", 1)
    writer.add_uint32("clip.vision.attention.head_count", HEADS)
    writer.add_uint32("clip.vision.projection_dim", text_width)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_uint32("clip.vision.image_size", IMAGE_SIZE)
    writer.add_uint32("clip.vision.patch_size", PATCH_SIZE)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_uint32("clip.vision.projector.scale_factor", SCALE_FACTOR)
    n_patches = (IMAGE_SIZE // PATCH_SIZE) ** 2
    # numpy shapes are ggml's dimensions reversed
    writer.add_tensor("v.patch_embd.weight", weights(WIDTH, 3, PATCH_SIZE, PATCH_SIZE))
    writer.add_tensor("v.patch_embd.bias", weights(WIDTH))
    writer.add_tensor("v.position_embd.weight", weights(n_patches, WIDTH))
    for name, shape in {
        "ln1": (WIDTH,),
        "ln2": (WIDTH,),
        "attn_q": (WIDTH, WIDTH),
        "attn_k": (WIDTH, WIDTH),
        "attn_v": (WIDTH, WIDTH),
        "attn_out": (WIDTH, WIDTH),
        "ffn_up": (FEED_FORWARD, WIDTH),
        "ffn_down": (WIDTH, FEED_FORWARD),
    }.items():
        is_norm = name.startswith("ln")
        writer.add_tensor(f"v.blk.0.{name}.weight", ones(WIDTH) if is_norm else weights(*shape))
        writer.add_tensor(f"v.blk.0.{name}.bias", weights(shape[0], scale=0.02))
    writer.add_tensor("v.post_ln.weight", ones(WIDTH))
    writer.add_tensor("v.post_ln.bias", weights(WIDTH, scale=0.02))
    writer.add_tensor("mm.soft_emb_norm.weight", weights(WIDTH, scale=0.1))
    # ggml's first dimension the text model's width: the projection is its transpose
    writer.add_tensor("mm.input_projection.weight", weights(WIDTH, text_width, scale=1.0))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def projector_once(folder: Path, *, text_width: int = TEXT_WIDTH) -> Path:
    """The test projector in ``folder`` (``text_width`` wide), written when missing."""
    target = folder / f"mmproj-test-gemma3-w{text_width}-v{LAYOUT_VERSION}.gguf"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.partial")
        write_projector(partial, text_width=text_width)
        os.replace(partial, target)
    return target
