"""Hugging Face Text Generation Inference, ``text-generation-launcher`` (flags from ``launcher/src/main.rs``).

TGI is no pip package: it comes as a container or built from source, and is found on PATH. Its launcher reads the
key from ``API_KEY`` (its ``--api-key``) and hands it to its router. It serves OpenAI's ``/v1/chat/completions``
(the Messages API) and ``/v1/completions``, whose request takes only OpenAI's basic sampling fields (no top_k,
min_p, presence_penalty, ignore_eos or response_format: those are refused here rather than dropped), and answers
a bad request with 422. Its anonymous usage statistics are turned off (``--usage-stats off``): a local server
reports to no one.
"""

from __future__ import annotations

from localinfer.backends.engine_process.recipe import Failure, PlannerFlags, Recipe, program

TGI = Recipe(
    name="tgi",
    title="TGI",
    command=program("text-generation-launcher"),
    model_flag="--model-id",
    host_flag="--hostname",
    key_env="API_KEY",
    served_name_flag=None,  # it answers to any model name, and names its model by --model-id
    fixed_args=("--usage-stats", "off"),
    flags=PlannerFlags(
        tensor_parallel="--num-shard",
        memory_fraction="--cuda-memory-fraction",
        max_model_len="--max-total-tokens",
        kv_cache_dtype="--kv-cache-dtype",  # fp8_e4m3fn, fp8_e5m2
        max_seqs="--max-concurrent-requests",
    ),
    default_max_seqs=128,
    failures=(
        Failure(r"CUDA out of memory|Not enough memory to handle", "the GPU ran out of memory"),
        Failure(r"ShardCannotStart|Shard [0-9]+ failed to start", "a TGI shard could not start"),
        Failure(r"No CUDA GPUs are available", "TGI found no GPU it can use"),
    ),
    honours=frozenset({"temperature", "top_p", "repeat_penalty", "frequency_penalty", "seed", "stop", "max_tokens"}),
)
