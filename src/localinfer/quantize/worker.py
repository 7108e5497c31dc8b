"""The process that runs ``llama_model_quantize``: ``python -m localinfer.quantize.worker JSON``.

The quantizer is one C call that cannot be interrupted, so it runs in a child process the parent can kill on
Ctrl-C. llama.cpp logs one ``[ i/ n] tensor ...`` line per tensor on stderr, which the parent reads for progress.
The exit status is llama_model_quantize's (0 on success).
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Any


def quantize(job: dict[str, Any]) -> int:
    """Quantize ``job["source"]`` to ``job["target"]`` with the llama_model_quantize_params in ``job``."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(job["ftype"])
    params.nthread = int(job.get("threads") or 0)
    params.allow_requantize = bool(job.get("allow_requantize"))
    params.pure = bool(job.get("pure"))
    if job.get("output_tensor_type") is not None:
        params.output_tensor_type = int(job["output_tensor_type"])
    if job.get("token_embedding_type") is not None:
        params.token_embedding_type = int(job["token_embedding_type"])
    source = str(job["source"]).encode()
    target = str(job["target"]).encode()
    return int(llama_cpp.llama_model_quantize(source, target, ctypes.byref(params)))


def main(argv: list[str]) -> int:
    return quantize(json.loads(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
