"""What ``localinfer show`` says about a model's multimodal projector: what the model sees and hears through it, the
projector's facts as ``ollama show`` lists them (architecture, parameters, embedding length, dimensions), the images
it takes, and a projector whose embeddings do not fit the model (llama.cpp refuses that pair at load)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.render import format_parameters, row
from localinfer.errors import LocalInferError

if TYPE_CHECKING:
    from localinfer.models.metadata import GGUFInfo, ProjectorInfo
    from localinfer.models.store import Manifest

_MB = 1_000_000
_SENSES = (("vision", "sees images, through its projector"), ("audio", "hears sounds, through its projector"))


@dataclass(frozen=True)
class Seen:
    """A model's projector: its file, and what it says, or why it cannot be read."""

    path: Path
    info: ProjectorInfo | None
    error: str | None = None


def projector_of(manifest: Manifest) -> Seen | None:
    """The model's projector as its file says, None for a model without one; one that cannot be read says why."""
    if manifest.projector is None:
        return None
    from localinfer.models.metadata import read_projector_info

    path = manifest.projector.path
    try:
        return Seen(path, read_projector_info(path))
    except LocalInferError as exc:
        return Seen(path, None, exc.message)


def mismatch(seen: Seen | None, model: GGUFInfo) -> str | None:
    """Why llama.cpp would refuse this projector with this model (their widths differ), or None."""
    if seen is None or seen.info is None or seen.info.text_width is None or model.embedding_length is None:
        return None
    if seen.info.text_width == model.embedding_length:
        return None
    return (
        f"its embeddings are {seen.info.text_width} wide and the model's {model.embedding_length}: this projector is "
        "not the model's, and loading refuses the pair"
    )


def projector_capabilities(seen: Seen | None) -> list[tuple[str, str | None]]:
    """``vision`` and ``audio`` rows for Capabilities, as the projector says."""
    if seen is None or seen.info is None:
        return []
    return [(sense, note) for sense, note in _SENSES if sense in seen.info.modalities]


def projector_section(seen: Seen | None, model: GGUFInfo) -> list[str]:
    """The Projector section's rows: empty for a model without one."""
    if seen is None:
        return []
    if seen.info is None:
        return [row("file", str(seen.path)), row("unreadable", seen.error)]
    info = seen.info
    rows: list[tuple[str, str | None]] = [
        ("architecture", "clip"),
        ("type", info.projector_type or info.audio_projector_type),
        ("parameters", format_parameters(info.parameters)),
        ("quantization", info.quantization),
        ("embedding length", _str(info.embedding_length)),
        ("dimensions", _str(info.text_width)),
        ("layers", _str(info.block_count)),
        ("image size", _image_size(info)),
        ("mismatch", mismatch(seen, model)),
        ("file", f"{seen.path}  {info.size_bytes / _MB:.1f} MB"),
    ]
    return [row(label, value) for label, value in rows if value is not None]


def projector_json(seen: Seen | None, model: GGUFInfo) -> dict[str, Any]:
    """``projector`` for ``show --json`` (None without one), and the capabilities it adds."""
    if seen is None:
        return {"projector": None}
    info = seen.info
    if info is None:
        return {"projector": {"path": str(seen.path), "error": seen.error}}
    return {
        "projector": {
            "path": str(seen.path),
            "modalities": list(info.modalities),
            "projector_type": info.projector_type,
            "audio_projector_type": info.audio_projector_type,
            "parameters": info.parameters,
            "quantization": info.quantization,
            "embedding_length": info.embedding_length,
            "dimensions": info.text_width,
            "block_count": info.block_count,
            "image_size": info.image_size,
            "patch_size": info.patch_size,
            "image_tokens": info.image_tokens,
            "mismatch": mismatch(seen, model),
        }
    }


def _image_size(info: ProjectorInfo) -> str | None:
    if info.image_size is None or info.patch_size is None:
        return None
    return f"{info.image_size} px in {info.patch_size}-px patches ({info.image_tokens} patches)"


def _str(value: int | None) -> str | None:
    return None if value is None else str(value)
