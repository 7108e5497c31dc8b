"""File names: quantization labels, split parts, auxiliary files, and the choice of a repository's model file."""

from __future__ import annotations

import pytest

from localinfer.models.files import choose_files, group_model_files, is_auxiliary, quant_label, split_part


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("llama-2-7b-chat.Q5_K_S.gguf", "Q5_K_S"),
        ("qwen2.5-coder-1.5b-instruct-q8_0.gguf", "Q8_0"),
        ("Qwen3-30B-A3B-UD-Q4_K_XL-00001-of-00002.gguf", "UD-Q4_K_XL"),
        ("Model-IQ4_XS.gguf", "IQ4_XS"),
        ("gemma-3-270m-it-BF16.gguf", "BF16"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("model.gguf", None),
    ],
)
def test_quant_label_reads_every_naming_style(name: str, quant: str | None) -> None:
    assert quant_label(name) == quant


def test_split_parts_and_auxiliary_files_are_recognised() -> None:
    assert split_part("x/Model-Q8_0-00002-of-00003.gguf") == (2, 3)
    assert split_part("Model-Q8_0.gguf") is None
    assert is_auxiliary("mmproj-Model-f16.gguf") and is_auxiliary("Model.imatrix.gguf")
    assert not is_auxiliary("Model-Q4_K_M.gguf")


def test_split_parts_form_one_group_in_order_and_a_missing_part_marks_it_incomplete() -> None:
    groups = group_model_files(
        ["M-Q8_0-00002-of-00002.gguf", "README.md", "M-Q8_0-00001-of-00002.gguf", "N-Q4_0-00001-of-00003.gguf"]
    )
    assert [g.paths for g in groups] == [
        ("M-Q8_0-00001-of-00002.gguf", "M-Q8_0-00002-of-00002.gguf"),
        ("N-Q4_0-00001-of-00003.gguf",),
    ]
    assert [g.complete for g in groups] == [True, False]


BARTOWSKI = ["Model-IQ4_XS.gguf", "Model-Q8_0.gguf", "Model-Q4_K_M.gguf", "mmproj-Model-f16.gguf"]


def test_without_a_tag_q4_k_m_is_preferred() -> None:
    choice = choose_files(group_model_files(BARTOWSKI), None)
    assert choice is not None and choice.group.main == "Model-Q4_K_M.gguf"
    assert "Q4_K_M" in choice.reason


def test_without_q4_k_m_q8_0_then_the_first_file_is_chosen() -> None:
    choice = choose_files(group_model_files(["a-Q2_K.gguf", "a-Q8_0.gguf"]), None)
    assert choice is not None and choice.group.main == "a-Q8_0.gguf"
    choice = choose_files(group_model_files(["mmproj-f16.gguf", "a-Q2_K.gguf", "a-Q3_K_M.gguf"]), None)
    assert choice is not None and choice.group.main == "a-Q2_K.gguf"


def test_a_tag_matches_case_insensitively_and_never_picks_a_projector() -> None:
    choice = choose_files(group_model_files(BARTOWSKI), "q8_0")
    assert choice is not None and choice.group.main == "Model-Q8_0.gguf"
    assert choose_files(group_model_files(BARTOWSKI), "f16") is None
    assert choose_files(group_model_files(BARTOWSKI), "Q6_K") is None


REPO = ["M-Q2_K.gguf", "M-Q4_K_M.gguf", "M-Q6_K.gguf", "M-Q8_0.gguf", "M-F16.gguf"]
SIZES = {"M-Q2_K.gguf": 3_000, "M-Q4_K_M.gguf": 5_000, "M-Q6_K.gguf": 6_600, "M-Q8_0.gguf": 8_500, "M-F16.gguf": 16_000}


@pytest.mark.parametrize(
    ("room", "quant", "words"),
    [
        (100_000, "Q8_0", "Q8_0 is the best quantization that fits"),  # never F16 without a tag, however much room
        (7_000, "Q6_K", "Q6_K is the largest quantization that fits"),
        (5_500, "Q4_K_M", "Q4_K_M is the largest quantization that fits"),
        (1_000, "Q2_K", "none fits this machine's memory: Q2_K is the smallest"),
    ],
)
def test_without_a_tag_the_best_quantization_that_fits_is_chosen(room: int, quant: str, words: str) -> None:
    choice = choose_files(group_model_files(REPO), None, sizes=SIZES, fits=lambda size: size <= room)
    assert choice is not None
    assert (choice.group.quant, words in choice.reason) == (quant, True)


def test_a_tag_wins_over_what_fits() -> None:
    choice = choose_files(group_model_files(REPO), "f16", sizes=SIZES, fits=lambda size: size <= 1)
    assert choice is not None and choice.group.quant == "F16"
