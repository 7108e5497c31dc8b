"""A projector's header as llama.cpp's clip loader reads it: what it sees and hears, its text width, its weights."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from localinfer.errors import ModelLoadError
from localinfer.models.metadata import cached_projector_info, read_projector_info
from tests.conftest import write_gguf
from tests.projector_gguf import write_projector


def test_a_vision_projector_says_what_it_sees_and_how_wide_its_embeddings_are(tmp_path: Path) -> None:
    info = read_projector_info(write_projector(tmp_path / "p.gguf", text_width=640, image_size=64, patch_size=8))
    assert info.modalities == ("vision",)
    assert (info.projector_type, info.text_width, info.projection_dim) == ("gemma3", 640, 640)
    assert (info.image_size, info.patch_size, info.image_tokens) == (64, 8, 64)
    assert (info.embedding_length, info.block_count, info.head_count) == (32, 1, 2)
    assert info.quantization == "F16" and info.parameters == 32 * 3 * 8 * 8 + 32 * 640
    assert info.metadata["general.architecture"] == "clip"
    assert info.metadata["general.parameter_count"] == info.parameters
    assert info.metadata["clip.vision.image_mean"] is None  # arrays are not read


def test_a_projector_that_hears_too_says_so(tmp_path: Path) -> None:
    info = read_projector_info(write_projector(tmp_path / "p.gguf", audio=True))
    assert info.modalities == ("vision", "audio")
    assert info.audio_projector_type == "gemma3"


def test_the_compute_estimate_grows_with_the_square_of_the_image_tokens(tmp_path: Path) -> None:
    small = read_projector_info(write_projector(tmp_path / "s.gguf", image_size=32, patch_size=8))
    large = read_projector_info(write_projector(tmp_path / "l.gguf", image_size=64, patch_size=8))
    assert small.image_tokens == 16 and large.image_tokens == 64
    assert large.compute_bytes > 4 * small.compute_bytes > 0


def test_a_language_model_is_not_a_projector(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not a multimodal projector"):
        read_projector_info(write_gguf(tmp_path / "m.gguf", file_type=gguf.LlamaFileType.MOSTLY_Q8_0))


def test_a_truncated_projector_is_refused(tmp_path: Path) -> None:
    path = write_projector(tmp_path / "p.gguf")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ModelLoadError, match="truncated"):
        read_projector_info(path)


def test_the_cached_reading_follows_a_changed_file(tmp_path: Path) -> None:
    path = write_projector(tmp_path / "p.gguf", text_width=576)
    assert cached_projector_info(path).text_width == 576
    write_projector(tmp_path / "p.gguf", text_width=640, extra_bytes=64)
    assert cached_projector_info(path).text_width == 640
