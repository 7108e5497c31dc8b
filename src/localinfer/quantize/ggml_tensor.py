"""What the importance-matrix collector reads of a ggml graph node: a ctypes mirror of ``struct ggml_tensor`` and
the two functions of libggml-base that copy a tensor's data out of whatever memory holds it (CPU or GPU).

The layout is ``ggml/include/ggml.h`` of the llama.cpp that llama-cpp-python vendors (GGML_MAX_DIMS 4,
GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10, GGML_MAX_NAME 64): 336 bytes on a 64-bit build, ``name`` at offset 256.
``check_layout`` compares the enum values used here with what the loaded library says, so a llama-cpp-python built
from another llama.cpp fails loudly instead of reading the wrong fields.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from localinfer.errors import QuantizeError

GGML_OP_MUL_MAT = 29  # enum ggml_op
GGML_OP_MUL_MAT_ID = 30
GGML_TYPE_F32 = 0  # enum ggml_type
_MAX_DIMS = 4


class GgmlTensor(ctypes.Structure):
    """``struct ggml_tensor``, field for field. Pointers are kept as addresses (``c_void_p``): a node's sources
    are read with ``GgmlTensor.from_address``."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * _MAX_DIMS),
        ("nb", ctypes.c_size_t * _MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def source(tensor: GgmlTensor, index: int) -> GgmlTensor | None:
    """The node's ``index``-th source tensor, or None."""
    address = tensor.src[index]
    return GgmlTensor.from_address(address) if address else None


def weight_name(tensor: GgmlTensor) -> str:
    """The tensor's name without a backend's prefix and suffix (``CUDA0#blk.0.attn_k.weight#0`` is
    ``blk.0.attn_k.weight``), as llama-imatrix's ``filter_tensor_name`` strips them."""
    name: str = bytes(tensor.name).decode("utf-8", errors="replace")
    if "#" in name:
        name = name.split("#", 2)[1]
    return name


@functools.cache
def _ggml_base() -> Any:
    """libggml-base, the one libllama loaded (llama-cpp-python ships them side by side)."""
    from llama_cpp import llama_cpp as lc
    from llama_cpp._ctypes_extensions import load_shared_library

    base = load_shared_library("ggml-base", lc._base_path)
    base.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    base.ggml_backend_tensor_get.restype = None
    base.ggml_nbytes.argtypes = [ctypes.c_void_p]
    base.ggml_nbytes.restype = ctypes.c_size_t
    base.ggml_op_name.argtypes = [ctypes.c_int]
    base.ggml_op_name.restype = ctypes.c_char_p
    base.ggml_type_name.argtypes = [ctypes.c_int]
    base.ggml_type_name.restype = ctypes.c_char_p
    return base


def check_layout() -> None:
    """Raise QuantizeError when the loaded ggml numbers its operations or types otherwise than this mirror."""
    base = _ggml_base()
    expected = {base.ggml_op_name(GGML_OP_MUL_MAT): b"MUL_MAT", base.ggml_op_name(GGML_OP_MUL_MAT_ID): b"MUL_MAT_ID"}
    if any(found != name for found, name in expected.items()) or base.ggml_type_name(GGML_TYPE_F32) != b"f32":
        raise QuantizeError(
            "the installed llama-cpp-python's ggml does not match the one localinfer's imatrix collector reads",
            hint="reinstall localinfer's pinned llama-cpp-python (scripts/setup)",
        )


def read_f32(address: int, tensor: GgmlTensor) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The F32 tensor at ``address`` as an array of shape (ne3, ne2, ne1, ne0), copied to host memory with
    ``ggml_backend_tensor_get`` (so a tensor on a GPU reads the same), its strides kept."""
    base = _ggml_base()
    nbytes = int(base.ggml_nbytes(address))
    raw = np.empty(nbytes, dtype=np.uint8)
    base.ggml_backend_tensor_get(address, raw.ctypes.data, 0, nbytes)
    ne = [int(n) for n in tensor.ne]
    nb = [int(n) for n in tensor.nb]
    if nb[0] != 4:
        raise QuantizeError(f"activation {weight_name(tensor)} is not packed F32 (row stride {nb[0]})")
    view: np.ndarray[Any, np.dtype[np.float32]] = np.ndarray(
        shape=(ne[3], ne[2], ne[1], ne[0]), dtype=np.float32, buffer=raw, strides=(nb[3], nb[2], nb[1], nb[0])
    )
    return view
