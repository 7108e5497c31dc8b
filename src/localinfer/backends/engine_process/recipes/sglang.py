"""SGLang's OpenAI server, ``python -m sglang.launch_server`` (flags from ``python/sglang/srt/server_args.py``).

SGLang takes its key only as ``--api-key``, which on the command line any local user could read (``ps``): it is
started through ``keyed_main``, which adds the flag in-process from the environment, so its command line holds no
key. It listens on 127.0.0.1 only, and localinfer checks clients' keys itself before any request reaches it.
"""

from __future__ import annotations

from localinfer.backends.engine_process.recipe import SAMPLING_FIELDS, Failure, PlannerFlags, Recipe, python_module

SGLANG = Recipe(
    name="sglang",
    title="SGLang",
    command=python_module("sglang.launch_server"),
    model_flag="--model-path",
    key_flag="--api-key",  # added by keyed_main in-process, never on the command line
    served_name_flag="--served-model-name",
    flags=PlannerFlags(
        tensor_parallel="--tp-size",
        memory_fraction="--mem-fraction-static",
        max_model_len="--context-length",
        kv_cache_dtype="--kv-cache-dtype",  # auto, fp8_e5m2, fp8_e4m3
        max_seqs="--max-running-requests",
    ),
    default_max_seqs=256,  # an estimate: SGLang sizes its batch from the memory left for the KV cache
    failures=(
        Failure(r"Not enough memory|CUDA out of memory", "the GPU ran out of memory: lower --mem-fraction-static"),
        Failure(r"No CUDA GPUs are available|Found no NVIDIA driver", "SGLang found no GPU it can use"),
        Failure(r"No module named '?sglang", "SGLang is not installed: pip install 'localinfer[sglang]'"),
    ),
    honours=frozenset({*SAMPLING_FIELDS, "seed", "stop", "max_tokens", "ignore_eos", "json"}),
)
