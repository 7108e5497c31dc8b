"""Small multimodal projector files (``mmproj`` GGUFs, architecture ``clip``) for tests that read projectors without
loading them: the clip keys llama.cpp's loader reads and the tensor that gives the text width, nothing to encode
with (tests/vision_model.py makes one that loads)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_projector(
    path: Path,
    *,
    text_width: int = 576,
    vision: bool = True,
    audio: bool = False,
    projector_type: str = "gemma3",
    width: int = 32,
    image_size: int = 32,
    patch_size: int = 8,
    heads: int = 2,
    file_type: gguf.LlamaFileType = gguf.LlamaFileType.MOSTLY_F16,
    name: str = "tiny test projector",
    extra_bytes: int = 0,
) -> Path:
    """Write a projector whose embeddings are ``text_width`` wide (``mm.input_projection.weight``, gemma3's place,
    holds it), seeing and/or hearing, ``extra_bytes`` larger (a tensor of zeros); returns ``path``."""
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_name(name)
    writer.add_file_type(int(file_type))
    writer.add_string("clip.projector_type", projector_type)
    writer.add_bool("clip.has_vision_encoder", vision)
    writer.add_bool("clip.has_audio_encoder", audio)
    for kind, on in (("vision", vision), ("audio", audio)):
        if not on:
            continue
        writer.add_uint32(f"clip.{kind}.embedding_length", width)
        writer.add_uint32(f"clip.{kind}.feed_forward_length", width * 2)
        writer.add_uint32(f"clip.{kind}.block_count", 1)
        writer.add_uint32(f"clip.{kind}.attention.head_count", heads)
        writer.add_uint32(f"clip.{kind}.projection_dim", text_width)
        writer.add_float32(f"clip.{kind}.attention.layer_norm_epsilon", 1e-6)
    if vision:
        writer.add_uint32("clip.vision.image_size", image_size)
        writer.add_uint32("clip.vision.patch_size", patch_size)
        writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
        writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_tensor("v.patch_embd.weight", np.zeros((width, 3, patch_size, patch_size), dtype=np.float16))
    # numpy's shape is ggml's reversed: ggml's first dimension (ne[0]) is the text width
    writer.add_tensor("mm.input_projection.weight", np.zeros((width, text_width), dtype=np.float16))
    if extra_bytes:
        writer.add_tensor("v.post_ln.weight", np.zeros(extra_bytes // 2, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
