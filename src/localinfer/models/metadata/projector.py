"""What a multimodal projector (an ``mmproj`` GGUF, architecture ``clip``) says about itself: whether it sees and
hears, its projector type, the images it takes, the text width its embeddings have, its weights, and a rough
estimate of the compute buffer llama.cpp's clip reserves for it. Read from its header, as llama.cpp's clip loader
reads the same keys; the weights are never read."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from localinfer.errors import ModelLoadError
from localinfer.models.metadata.gguf import read_gguf_info, read_gguf_metadata
from localinfer.models.metadata.gguf_file import Scalar
from localinfer.models.metadata.gguf_tensors import TensorEntry, read_gguf_tensors

CLIP_ARCHITECTURE = "clip"
_F32 = 4
_WARMUP_TOKENS_CAP = 46 * 46

# Where llama.cpp's clip reads the width of the embeddings a projector hands the text model
# (``clip_n_mmproj_embd``): a tensor and the dimension of it, per projector type, for the types people meet.
_WIDTH_TENSORS: dict[str, tuple[str, int]] = {
    "gemma3": ("mm.input_projection.weight", 0),
    "gemma3nv": ("mm.input_projection.weight", 0),
    "gemma4v": ("mm.input_projection.weight", 1),
    "gemma4a": ("mm.input_projection.weight", 1),
    "idefics3": ("mm.model.fc.weight", 1),
    "qwen2a": ("mm.model.fc.weight", 1),
    "mlp": ("mm.2.weight", 1),
    "pixtral": ("mm.2.weight", 1),
    "phi4": ("mm.2.weight", 1),
    "lightonocr": ("mm.2.weight", 1),
    "ultravox": ("mm.2.weight", 1),
    "voxtral": ("mm.2.weight", 1),
    "lfm2": ("mm.2.weight", 1),
    "kimivl": ("mm.2.weight", 1),
    "qwen3a": ("mm.2.weight", 1),
    "mlp_norm": ("mm.3.bias", 0),
    "qwen2vl_merger": ("mm.2.bias", 0),
    "qwen2.5vl_merger": ("mm.2.bias", 0),
    "internvl": ("mm.3.weight", 1),
}


@dataclass(frozen=True)
class ProjectorInfo:
    """A projector file's facts; a field the file does not state is None.

    ``text_width`` is the width of the embeddings it hands the text model, which must equal the model's
    ``embedding_length`` (llama.cpp refuses the pair otherwise); ``metadata`` is every header key (arrays as None),
    with ``general.parameter_count`` added, as Ollama's ``/api/show`` gives it under ``projector_info``.
    """

    vision: bool
    audio: bool
    projector_type: str | None
    audio_projector_type: str | None
    image_size: int | None
    patch_size: int | None
    embedding_length: int | None
    feed_forward_length: int | None
    block_count: int | None
    head_count: int | None
    projection_dim: int | None
    text_width: int | None
    parameters: int
    size_bytes: int
    quantization: str | None
    image_max_pixels: int | None
    metadata: dict[str, Scalar | None]

    @property
    def modalities(self) -> tuple[str, ...]:
        """What a model with this projector takes besides text: ``vision``, ``audio``."""
        return tuple(m for m, has in (("vision", self.vision), ("audio", self.audio)) if has)

    @property
    def image_tokens(self) -> int | None:
        """Patches of the image llama.cpp's clip sizes its compute buffer for: the fixed image size, or for a
        projector that takes any size, its largest, as clip caps its warm-up (46 x 46 patches)."""
        if self.patch_size is None or self.patch_size <= 0:
            return None
        if self.image_max_pixels:
            return min(self.image_max_pixels // self.patch_size**2, _WARMUP_TOKENS_CAP)
        if self.image_size:
            return (self.image_size // self.patch_size) ** 2
        return None

    @property
    def compute_bytes(self) -> int:
        """A rough estimate of the compute buffer llama.cpp's clip reserves to encode one image of the largest size:
        one layer's attention scores (tokens x tokens x heads, f32) and its activations (tokens x the widths); 0 when
        the file does not say enough. An audio-only projector counts as one 30-second window of 1500 frames."""
        tokens = self.image_tokens if self.vision else 1500
        width = self.embedding_length or 0
        if not tokens or not width:
            return 0
        heads = self.head_count or 1
        activations = tokens * (4 * width + 2 * (self.feed_forward_length or 4 * width))
        return (tokens * tokens * heads + activations) * _F32


def read_projector_info(path: Path) -> ProjectorInfo:
    """Read the projector at ``path``. Raises ModelNotFound when there is no file, ModelLoadError when it is not a
    complete GGUF projector (architecture ``clip`` with a vision or an audio encoder)."""
    path = Path(path)
    info = read_gguf_info(path)
    if info.architecture != CLIP_ARCHITECTURE:
        raise ModelLoadError(
            f"{path} is not a multimodal projector (its architecture is {info.architecture}, not clip)",
            hint="pass the model's mmproj-*.gguf file",
        )
    meta = read_gguf_metadata(path)
    tensors, _ = read_gguf_tensors(path)
    vision, audio = meta.get("clip.has_vision_encoder") is True, meta.get("clip.has_audio_encoder") is True
    if not vision and not audio:
        raise ModelLoadError(
            f"{path} has neither a vision nor an audio encoder (clip.has_vision_encoder, clip.has_audio_encoder)",
            hint="the projector file is broken; download or convert it again",
        )
    either = _text(meta.get("clip.projector_type"))
    kind = "vision" if vision else "audio"
    vision_type = _text(meta.get("clip.vision.projector_type")) or either if vision else None
    audio_type = _text(meta.get("clip.audio.projector_type")) or either if audio else None

    def num(key: str) -> int | None:
        value = meta.get(f"clip.{kind}.{key}")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    projection_dim = num("projection_dim")
    return ProjectorInfo(
        vision=vision,
        audio=audio,
        projector_type=vision_type,
        audio_projector_type=audio_type,
        image_size=num("image_size") if vision else None,
        patch_size=num("patch_size") if vision else None,
        embedding_length=num("embedding_length"),
        feed_forward_length=num("feed_forward_length"),
        block_count=num("block_count"),
        head_count=num("attention.head_count"),
        projection_dim=projection_dim,
        text_width=_text_width(vision_type or audio_type, tensors) or projection_dim,
        parameters=info.parameters or 0,
        size_bytes=info.size_bytes,
        quantization=info.quantization,
        image_max_pixels=num("image_max_pixels") if vision else None,
        metadata={**meta, "general.parameter_count": info.parameters or 0},
    )


def cached_projector_info(path: Path) -> ProjectorInfo:
    """``read_projector_info``, remembered per path, size and mtime (listings ask on every call)."""
    path = Path(path)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return read_projector_info(path)  # raises ModelNotFound
    return _cached(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _cached(path: Path, size: int, mtime_ns: int) -> ProjectorInfo:
    return read_projector_info(path)


def _text_width(projector_type: str | None, tensors: tuple[TensorEntry, ...]) -> int | None:
    where = _WIDTH_TENSORS.get(projector_type or "")
    if where is None:
        return None
    name, dim = where
    tensor = next((t for t in tensors if t.name == name), None)
    return tensor.shape[dim] if tensor is not None and len(tensor.shape) > dim else None


def _text(value: Scalar | None) -> str | None:
    return value if isinstance(value, str) and value else None
