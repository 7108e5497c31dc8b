"""The process that runs ``llama_model_quantize``: ``python -m localinfer.quantize.worker JSON``.

The quantizer is one C call that cannot be interrupted, so it runs in a child process the parent can kill on
Ctrl-C. llama.cpp logs one ``[ i/ n] tensor ...`` line per tensor on stderr, which the parent reads for progress.
The exit status is llama_model_quantize's (0 on success).

With ``job["imatrix"]`` (a file path), the importance matrix is loaded here and handed to the quantizer as
llama-quantize hands it: a ``llama_model_imatrix_data`` array (name, values, size) ending with a NULL name, the
values divided by their counts (``imatrix.Matrix.values``), and the ``quantize.imatrix.*`` keys it writes into the
output (file, first dataset, entries, chunks).
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from typing import Any

_KV_INT = 0  # llama.h's LLAMA_KV_OVERRIDE_TYPE_INT
_KV_STR = 3  # LLAMA_KV_OVERRIDE_TYPE_STR


def quantize(job: dict[str, Any]) -> int:
    """Quantize ``job["source"]`` to ``job["target"]`` with the llama_model_quantize_params in ``job``."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(job["ftype"])
    params.nthread = int(job.get("threads") or 0)
    params.allow_requantize = bool(job.get("allow_requantize"))
    params.pure = bool(job.get("pure"))
    params.keep_split = bool(job.get("keep_split"))
    if job.get("output_tensor_type") is not None:
        params.output_tensor_type = int(job["output_tensor_type"])
    if job.get("token_embedding_type") is not None:
        params.token_embedding_type = int(job["token_embedding_type"])
    kept: list[Any] = []  # the arrays params points into, alive until the quantizer returns
    if job.get("imatrix"):
        imatrix, overrides = imatrix_params(Path(job["imatrix"]), str(job.get("imatrix_name") or job["imatrix"]))
        kept += [imatrix, overrides]
        params.imatrix = ctypes.cast(imatrix, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
        params.kv_overrides = ctypes.cast(overrides, ctypes.POINTER(llama_cpp.llama_model_kv_override))
    source = str(job["source"]).encode()
    target = str(job["target"]).encode()
    return int(llama_cpp.llama_model_quantize(source, target, ctypes.byref(params)))


def imatrix_params(path: Path, name: str) -> tuple[Any, Any]:
    """The ``llama_model_imatrix_data`` array (NULL-terminated) of the importance matrix in ``path``, and the
    ``llama_model_kv_override`` array (empty-key-terminated) recording it, as llama-quantize builds them. The
    value arrays are owned by the returned array (ctypes keeps them)."""
    import llama_cpp
    import numpy as np

    from localinfer.quantize.imatrix import load_imatrix

    matrix = load_imatrix(path)
    values = matrix.values()
    data = (llama_cpp.llama_model_imatrix_data * (len(values) + 1))()
    owners: list[Any] = []
    for slot, (tensor, array) in zip(data, sorted(values.items()), strict=False):
        contiguous = np.ascontiguousarray(array, dtype=np.float32)
        owners.append(contiguous)
        slot.name = tensor.encode()
        slot.data = contiguous.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        slot.size = contiguous.size
    data._owners = owners  # type: ignore[attr-defined]
    settings: list[tuple[str, int | str]] = [("quantize.imatrix.file", name)]
    if matrix.datasets:
        settings.append(("quantize.imatrix.dataset", matrix.datasets[0]))
    settings.append(("quantize.imatrix.entries_count", len(values)))
    if matrix.chunk_count > 0:
        settings.append(("quantize.imatrix.chunks_count", matrix.chunk_count))
    overrides = (llama_cpp.llama_model_kv_override * (len(settings) + 1))()
    for override, (key, value) in zip(overrides, settings, strict=False):
        override.key = key.encode()
        if isinstance(value, int):
            override.tag = _KV_INT
            override.value.val_i64 = value
        else:
            override.tag = _KV_STR
            override.value.val_str = value.encode()[:127]
    return data, overrides


def main(argv: list[str]) -> int:
    return quantize(json.loads(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
