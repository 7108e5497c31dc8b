"""The quantization types llama.cpp's quantizer writes, as data: name -> ``llama_ftype`` and nominal bits per weight.

The names, aliases and order are ``QUANT_OPTIONS`` of llama.cpp's ``tools/quantize/quantize.cpp`` (the llama.cpp
that llama-cpp-python vendors); the bits per weight are those of the type's main tensor blocks, raised for the
mixes (``_M``, ``_L``) by the share of tensors they keep at a higher type. They size the output before it is
written; the file itself is what llama.cpp makes of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from localinfer.errors import QuantizeError


@dataclass(frozen=True)
class QuantType:
    name: str
    ftype: int  # llama_ftype
    bpw: float  # nominal bits per weight of the matrices
    needs_imatrix: bool = False  # llama.cpp refuses these without an importance matrix


# (name, llama_ftype, bpw, needs an imatrix); values of llama.h's enum llama_ftype
_TABLE: tuple[tuple[str, int, float, bool], ...] = (
    ("Q4_0", 2, 4.5, False),
    ("Q4_1", 3, 5.0, False),
    ("Q5_0", 8, 5.5, False),
    ("Q5_1", 9, 6.0, False),
    ("Q8_0", 7, 8.5, False),
    ("Q2_K", 10, 3.0, False),
    ("Q2_K_S", 21, 2.8, True),
    ("Q3_K_S", 11, 3.5, False),
    ("Q3_K_M", 12, 3.9, False),
    ("Q3_K_L", 13, 4.3, False),
    ("Q4_K_S", 14, 4.6, False),
    ("Q4_K_M", 15, 4.9, False),
    ("Q5_K_S", 16, 5.6, False),
    ("Q5_K_M", 17, 5.7, False),
    ("Q6_K", 18, 6.6, False),
    ("IQ2_XXS", 19, 2.1, True),
    ("IQ2_XS", 20, 2.35, True),
    ("IQ2_S", 28, 2.5, True),
    ("IQ2_M", 29, 2.7, False),
    ("IQ1_S", 24, 1.6, True),
    ("IQ1_M", 31, 1.75, True),
    ("IQ3_XXS", 23, 3.1, False),
    ("IQ3_XS", 22, 3.3, False),
    ("IQ3_S", 26, 3.45, False),
    ("IQ3_M", 27, 3.7, False),
    ("IQ4_NL", 25, 4.5, False),
    ("IQ4_XS", 30, 4.25, False),
    ("TQ1_0", 36, 1.7, False),
    ("TQ2_0", 37, 2.1, False),
    ("MXFP4_MOE", 38, 4.25, False),
    ("F16", 1, 16.0, False),
    ("BF16", 32, 16.0, False),
    ("F32", 0, 32.0, False),
)
TYPES: dict[str, QuantType] = {name: QuantType(name, ftype, bpw, imx) for name, ftype, bpw, imx in _TABLE}
ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}
# the ggml tensor types --output-tensor-type and --token-embedding-type take (ggml.h's enum ggml_type)
TENSOR_TYPES: dict[str, int] = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q5_0": 6,
    "Q5_1": 7,
    "Q8_0": 8,
    "Q2_K": 10,
    "Q3_K": 11,
    "Q4_K": 12,
    "Q5_K": 13,
    "Q6_K": 14,
    "IQ4_NL": 20,
    "IQ4_XS": 23,
    "BF16": 30,
}
_TENSOR_BPW = {"F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q6_K": 6.5625, "Q5_K": 5.5, "Q4_K": 4.5}


def type_names() -> str:
    """Every type name, comma-separated, for help texts and errors."""
    return ", ".join(TYPES)


def parse_type(text: str) -> QuantType:
    """The type ``text`` names (case-insensitive; Q4_K is Q4_K_M). Raises QuantizeError listing the types."""
    key = text.strip().upper()
    found = TYPES.get(ALIASES.get(key, key))
    if found is None:
        raise QuantizeError(f"unknown quantization type '{text}'", hint=f"use one of {type_names()}")
    return found


def parse_tensor_type(text: str, option: str) -> int:
    """The ggml type id ``text`` names, for ``option``. Raises QuantizeError listing the tensor types."""
    found = TENSOR_TYPES.get(text.strip().upper())
    if found is None:
        raise QuantizeError(f"unknown tensor type '{text}' for {option}", hint=f"use one of {', '.join(TENSOR_TYPES)}")
    return found


def fallback_bpw(quant: QuantType) -> float | None:
    """Bits per weight llama.cpp falls back to for a matrix whose rows are not a multiple of 256 (the super-block
    of the K and IQ types): IQ4_NL for the 1 to 4-bit types, Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K; None for
    types of 32-weight blocks, which need no fallback."""
    name = quant.name
    if name.startswith("Q4_K"):
        return 5.5
    if name.startswith("Q5_K"):
        return 6.0
    if name.startswith("Q6_K"):
        return 8.5
    if name.startswith(("Q2_K", "Q3_K", "IQ1", "IQ2", "IQ3", "IQ4_XS", "TQ")):
        return 4.5
    return None


def tensor_bpw(name: str) -> float:
    """Nominal bits per weight of the ggml tensor type ``name`` (Q4_0-like types: their block size)."""
    return _TENSOR_BPW.get(name.upper(), TYPES[name.upper()].bpw if name.upper() in TYPES else 8.5)
