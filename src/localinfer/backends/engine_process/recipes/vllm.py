"""vLLM's OpenAI server (``vllm serve``; flags from ``vllm/engine/arg_utils.py`` and ``vllm serve --help``)."""

from __future__ import annotations

from localinfer.backends.engine_process.recipe import SAMPLING_FIELDS, Failure, PlannerFlags, Recipe, python_module

VLLM = Recipe(
    name="vllm",
    title="vLLM",
    # the module `vllm serve` runs, with this interpreter: the extra localinfer[vllm] in the same environment
    command=python_module("vllm.entrypoints.openai.api_server"),
    model_flag="--model",
    key_env="VLLM_API_KEY",  # vLLM reads its --api-key from here too
    served_name_flag="--served-model-name",
    flags=PlannerFlags(
        tensor_parallel="--tensor-parallel-size",
        memory_fraction="--gpu-memory-utilization",
        max_model_len="--max-model-len",
        kv_cache_dtype="--kv-cache-dtype",
        max_seqs="--max-num-seqs",
    ),
    default_max_seqs=256,
    failures=(
        Failure(r"No available memory for the cache blocks|CUDA out of memory", "the GPU ran out of memory"),
        Failure(
            r"larger than the maximum number of tokens that can be stored in KV cache",
            "the context does not fit in the KV cache: lower --ctx-size or raise --engine-arg=--gpu-memory-utilization",
        ),
        Failure(r"No CUDA GPUs are available|Failed to infer device type", "vLLM found no GPU it can use"),
    ),
    honours=frozenset({*SAMPLING_FIELDS, "seed", "stop", "max_tokens", "ignore_eos", "json"}),
)
