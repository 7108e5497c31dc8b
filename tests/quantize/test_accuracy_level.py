"""Which MatMulNBits accuracy level a CPU model is built with: int8 activations only where they cannot saturate."""

from __future__ import annotations

import pytest

from localinfer.quantize.builder import accuracy_level


@pytest.mark.parametrize(
    ("features", "expected"),
    [
        (["avx2", "fma", "avx512f", "avx512_vnni"], 4),  # VNNI sums u8 x s8 in 32 bits: int8 activations are exact
        (["avx2", "fma"], 1),  # an AVX2-only AMD EPYC: vpmaddubsw saturates in 16 bits, so float32 activations
        ([], 1),  # unknown: the safe level
    ],
)
def test_cpu_int8_models_quantize_activations_only_where_the_cpu_has_vnni(features: list[str], expected: int) -> None:
    assert accuracy_level("int8", "cpu", features) == expected
    assert accuracy_level("int4", "cpu", features) == expected


def test_gpu_targets_and_float_precisions_keep_the_builders_default() -> None:
    assert accuracy_level("int8", "cuda", []) is None
    assert accuracy_level("int4", "dml", []) is None
    assert accuracy_level("fp16", "cpu", []) is None
