"""Which projector goes with a model, as llama.cpp's ``-hf`` picks it (``find_best_sibling``, common/download.cpp)."""

from __future__ import annotations

import pytest

from localinfer.models.projector import best_projector, quant_bits


@pytest.mark.parametrize(
    ("path", "bits"),
    [
        ("gemma-3-4b-it-Q4_K_M.gguf", 4),
        ("mmproj-model-f16.gguf", 16),
        ("mmproj-BF16.gguf", 16),
        ("mmproj-F32.gguf", 32),
        ("x/UD-Q4_K_XL.gguf", 4),
        ("model.Q8_0.gguf", 8),
        ("Q4_1/SmolLM2-Q4_1-00001-of-00002.gguf", 4),
        ("mmproj.gguf", 0),
        ("mmproj-model.gguf", 0),
    ],
)
def test_the_bits_are_read_from_the_last_part_of_the_name(path: str, bits: int) -> None:
    assert quant_bits(path) == bits


def test_the_precision_closest_to_the_models_wins_and_the_first_listed_breaks_a_tie() -> None:
    files = ["mmproj-F32.gguf", "mmproj-F16.gguf", "mmproj-BF16.gguf", "mmproj-Q8_0.gguf", "m-Q4_K_M.gguf"]
    assert best_projector(files, "m-Q4_K_M.gguf") == "mmproj-Q8_0.gguf"
    assert best_projector(files, "m-F16.gguf") == "mmproj-F16.gguf"
    assert best_projector(files, "m-BF16.gguf") == "mmproj-F16.gguf"
    assert best_projector(files, "m-F32.gguf") == "mmproj-F32.gguf"


def test_the_deepest_folder_above_the_model_wins_and_other_folders_never_count() -> None:
    files = ["mmproj-Q4_0.gguf", "Q8_0/mmproj-f32.gguf", "Q4_0/mmproj-f16.gguf", "Q8_0/m-Q8_0.gguf"]
    assert best_projector(files, "Q8_0/m-Q8_0.gguf") == "Q8_0/mmproj-f32.gguf"
    assert best_projector(files, "m-Q4_0.gguf") == "mmproj-Q4_0.gguf"
    assert best_projector(["sub/mmproj-f16.gguf"], "m-Q4_0.gguf") is None


def test_a_repository_without_a_projector_has_none() -> None:
    assert best_projector(["m-Q4_K_M.gguf", "imatrix.gguf", "README.md", "mmproj-notes.txt"], "m-Q4_K_M.gguf") is None
