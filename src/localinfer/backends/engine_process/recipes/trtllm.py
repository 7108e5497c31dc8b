"""NVIDIA TensorRT-LLM's OpenAI server, ``trtllm-serve MODEL`` (flags from ``tensorrt_llm/commands/serve.py``).

It serves a Hugging Face folder (its PyTorch backend) or a built TensorRT engine directory (``--backend
tensorrt``), recognised by its files: a ``config.json`` with the build's configuration and ``rank<N>.engine``
files. It checks no key and takes no served name (it answers to any model name): it listens on 127.0.0.1 only and
localinfer checks clients' keys itself. Its KV cache type is set in a YAML file (``--config``), so the planner
passes none; a built engine's is fixed when it is built. Installed from NVIDIA's index or container, and found on
PATH.
"""

from __future__ import annotations

import json
from pathlib import Path

from localinfer.backends.engine_process.recipe import SAMPLING_FIELDS, Failure, PlannerFlags, Recipe, program


def is_trtllm_engine(folder: Path) -> bool:
    """Whether ``folder`` holds a built TensorRT-LLM engine: ``rank<N>.engine`` files beside a ``config.json``
    stating the build (``build_config``; ``builder_config`` in older versions)."""
    if not any(folder.glob("rank*.engine")):
        return False
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and ("build_config" in config or "builder_config" in config)


def _engine_args(folder: Path) -> list[str]:
    return ["--backend", "tensorrt"] if is_trtllm_engine(folder) else []


TRTLLM = Recipe(
    name="trtllm",
    title="TensorRT-LLM",
    command=program("trtllm-serve"),
    model_flag=None,  # trtllm-serve MODEL
    model_args=_engine_args,
    flags=PlannerFlags(
        tensor_parallel="--tp_size",
        memory_fraction="--kv_cache_free_gpu_memory_fraction",
        max_model_len="--max_seq_len",
        kv_cache_dtype=None,
        max_seqs="--max_batch_size",
    ),
    default_max_seqs=2048,  # BuildConfig's max_batch_size
    failures=(
        Failure(r"CUDA out of memory|OutOfMemoryError", "the GPU ran out of memory"),
        Failure(r"No GPU devices found", "TensorRT-LLM found no GPU"),
        Failure(
            r"engine plan file is not compatible|Serialization assertion",
            "the engine was built for another GPU or TensorRT version: build it again on this machine",
        ),
    ),
    honours=frozenset({*SAMPLING_FIELDS, "seed", "stop", "max_tokens", "ignore_eos", "json"}),
    top_k_off=0,  # its CompletionRequest's "no top-k" (vLLM's and SGLang's is -1)
)
