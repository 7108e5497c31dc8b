"""Where a prompt's computing differs between localinfer's llama.cpp context and llama-server's (issue #42): one
model, one context per configuration, the same prompt of random token ids decoded in ``n_batch`` steps straight
through llama-cpp-python's C API (no server, no HTTP, no step loop), rounds alternating between the configurations.

On an H200 localinfer's prefill of a 1B F16 model at 8,192 tokens was 0.72x llama-server's (docs/benchmarks.md,
"Measured on an H200"), with the 3B and 8B at 0.96-0.99x. The two servers build their contexts differently, and
each configuration here changes one thing from llama-server's, so whichever is slow names its cause:

- ``llama-server``: as ``llama-server -np 1`` makes it (one sequence, ``kv_unified`` false, ``n_outputs_max`` 1:
  server_output_limits), with a CPU threadpool attached as common_init attaches one;
- ``no-threadpool``: the same without the threadpool (llama-cpp-python attaches none);
- ``outputs-batch``: ``n_outputs_max`` left at llama.cpp's default, the batch size (localinfer's until it sized it
  as llama-server does: step_limits.py);
- ``scratch``: two sequences in one unified KV cache (localinfer's one slot with KV shifting's scratch sequence);
- ``localinfer``: the context localinfer's loader makes from the same flags (backends/llamacpp/model.py);
- ``step-loop``: localinfer's backend itself, in this process (its step loop, no HTTP), given the prompt's ids with
  ``cache_prompt`` false and one token to generate; its time is the ``prompt_ms`` the server reports.

Each step is filled token by token as localinfer's step loop fills it, and the time is from the first
``llama_decode`` to ``llama_synchronize`` after the last. A configuration as fast as ``llama-server`` clears
what it changes; a gap between ``localinfer`` and ``step-loop`` lies in the loop, and one between ``step-loop`` and
the server's figure (bench/gpu_compare.py) in HTTP and the event loop.

MODEL is a GGUF file or a name bench/gpu_compare.py makes (``1b-F16``: random weights, SmolLM2's tokenizer), made
in ``--work`` unless it is there.

Usage: python bench/prefill_probe.py MODEL.gguf|NAME [--tokens 2048,8192] [--rounds 4] [--gpu-layers 99] [--fa on]
           [--threads N] [--instances 2] [--configs llama-server,...]
           [--work DIR --tokenizer TOKENIZER.gguf --llama-cpp-bin DIR] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import functools
import json
import logging
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as lc

from gpu_compare import model_file
from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.model import LlamaModel, default_threads
from localinfer.types import GenerationOptions, GenerationRequest, SamplingParams

GGML_MAX_N_THREADS = 512
# What each configuration changes in llama-server's context (module docstring); "llama-server" also gets a threadpool.
SERVER_CHANGES: dict[str, dict[str, Any]] = {
    "llama-server": {},
    "no-threadpool": {},
    "outputs-batch": {"n_outputs_max": 0, "n_outputs_max_per_seq": 0},
    "scratch": {"n_seq_max": 2, "kv_unified": True, "n_outputs_max": 2},
}
CONFIGS = (*SERVER_CHANGES, "localinfer", "step-loop")
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}


class ThreadpoolParams(ctypes.Structure):  # ggml.h's struct ggml_threadpool_params
    _fields_ = [
        ("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS),
        ("n_threads", ctypes.c_int),
        ("prio", ctypes.c_int),
        ("poll", ctypes.c_uint32),
        ("strict_cpu", ctypes.c_bool),
        ("paused", ctypes.c_bool),
    ]


class BufferSizes(logging.Handler):
    """Prints llama.cpp's "compute buffer size" lines (the model's log is routed to Python logging) under the name of
    the context being made: a context reserves logits for ``n_outputs_max`` outputs (llama-server's for one, the
    default for a batch), device memory on a GPU."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.making = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "compute buffer size" in message:
            print(f"{self.making}: {message.split(':', 1)[-1].strip()}", file=sys.stderr)


def attach_threadpool(ctx: Any, n_threads: int) -> Any:
    """A ggml CPU threadpool of ``n_threads``, attached to ``ctx`` as llama-server's common_init attaches one
    (its defaults: ggml_threadpool_params_default). Not bound in llama-cpp-python: reached through libllama's
    handle, which llama-cpp-python loads with RTLD_GLOBAL beside libggml-cpu."""
    lib = lc._lib
    lib.ggml_threadpool_params_default.restype = ThreadpoolParams
    lib.ggml_threadpool_params_default.argtypes = [ctypes.c_int]
    lib.ggml_threadpool_new.restype = ctypes.c_void_p
    lib.ggml_threadpool_new.argtypes = [ctypes.POINTER(ThreadpoolParams)]
    lib.llama_attach_threadpool.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    params = lib.ggml_threadpool_params_default(n_threads)
    pool = lib.ggml_threadpool_new(ctypes.byref(params))
    if not pool:
        raise RuntimeError("ggml_threadpool_new failed")
    lib.llama_attach_threadpool(ctx, pool, None)
    return pool


def server_context(model: Any, args: argparse.Namespace, **changes: Any) -> Any:
    """A context as llama-server's common_context_params_to_llama makes it for ``-c N -np 1 -fa F``, with
    ``changes`` to its llama_context_params."""
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = max(args.tokens) + 256
    cparams.n_batch = 2048
    cparams.n_ubatch = 512
    cparams.n_seq_max = 1
    cparams.n_outputs_max = 1
    cparams.n_outputs_max_per_seq = 1
    cparams.n_threads = cparams.n_threads_batch = args.threads
    cparams.flash_attn_type = FLASH_ATTN[args.fa]
    cparams.kv_unified = False
    cparams.swa_full = False
    for name, value in changes.items():
        setattr(cparams, name, value)
    ctx = lc.llama_init_from_model(model, cparams)
    if not ctx:
        raise RuntimeError(f"llama.cpp could not make the context {changes}")
    return ctx


def localinfer_spec(args: argparse.Namespace) -> LoadSpec:
    """What ``localinfer serve MODEL --ctx-size N --parallel 1 --gpu-layers L --flash-attn F --spec off
    --no-last-token-alone`` loads (bench/gpu_compare.py's flags)."""
    return LoadSpec(
        path=args.model,
        ctx_size=max(args.tokens) + 256,
        parallel=1,
        gpu_layers=args.gpu_layers,
        threads=args.threads,
        flash_attn=args.fa,
        speculation="off",
        last_token_alone=False,
    )


class StepLoopPrefill:
    """localinfer's backend in this process, on its own event loop: a prompt's ``prompt_ms``."""

    def __init__(self, spec: LoadSpec) -> None:
        self._loop = asyncio.new_event_loop()
        self._backend = LlamaCppBackend()
        self._loop.run_until_complete(self._backend.load(spec))

    def __call__(self, tokens: list[int]) -> float:
        return self._loop.run_until_complete(self._prompt_ms(tokens))

    def close(self) -> None:
        self._loop.run_until_complete(self._backend.unload())
        self._loop.close()

    async def _prompt_ms(self, tokens: list[int]) -> float:
        options = GenerationOptions(SamplingParams(temperature=0.0), max_tokens=1, cache_prompt=False)
        timings = None
        async for chunk in self._backend.generate(GenerationRequest("probe", "", options, tokens=tuple(tokens))):
            timings = chunk.timings or timings
        if timings is None or timings.prompt_n < len(tokens) - 1:
            raise RuntimeError(f"the step loop computed {timings and timings.prompt_n} of {len(tokens)} tokens")
        return timings.prompt_ms


def fill(batch: Any, tokens: list[int], start: int, n_batch: int) -> None:
    """Write the step of ``tokens`` from ``start`` into ``batch`` token by token, as the step loop's _add does: sequence
    0, logits for the prompt's last token only."""
    chunk = tokens[start : start + n_batch]
    for i, token in enumerate(chunk):
        batch.token[i] = token
        batch.pos[i] = start + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = start + i == len(tokens) - 1
    batch.n_tokens = len(chunk)


def prefill(ctx: Any, batch: Any, tokens: list[int], *, n_batch: int) -> float:
    """Milliseconds to compute ``tokens`` from an empty cache, ``n_batch`` a step, logits for the last only."""
    lc.llama_memory_clear(lc.llama_get_memory(ctx), True)
    lc.llama_synchronize(ctx)
    started = time.perf_counter()
    for start in range(0, len(tokens), n_batch):
        fill(batch, tokens, start, n_batch)
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
    lc.llama_synchronize(ctx)
    return (time.perf_counter() - started) * 1000.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a GGUF file, or a name bench/gpu_compare.py makes (1b-F16, 3b-Q4_K_M...)")
    p.add_argument("--tokens", type=lambda s: [int(x) for x in s.split(",")], default=[2048, 8192])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--gpu-layers", type=int, default=99)
    p.add_argument("--fa", choices=sorted(FLASH_ATTN), default="on")
    p.add_argument("--threads", type=int, default=default_threads())
    p.add_argument("--instances", type=int, default=2, help="contexts of each configuration (default 2)")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"which to measure (default all: {','.join(CONFIGS)})")
    p.add_argument("--work", type=Path, default=Path("/tmp/gpu-compare"), help="where a named model is made")
    p.add_argument("--tokenizer", type=Path, help="a GGUF with SmolLM2's tokenizer, for a named model")
    p.add_argument("--llama-cpp-bin", type=Path, help="llama-quantize's folder, for a named quantized model")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    args.model = Path(args.model)
    if not args.model.is_file():
        if args.tokenizer is None:
            p.error(f"{args.model} is not a file: give --tokenizer to make it")
        args.work.mkdir(parents=True, exist_ok=True)
        args.model = model_file(args.work, args.tokenizer, str(args.model), args.llama_cpp_bin or Path("."))

    configs = args.configs.split(",")
    if unknown := set(configs) - set(CONFIGS):
        p.error(f"unknown --configs {sorted(unknown)}: choose from {','.join(CONFIGS)}")
    sizes = BufferSizes()
    llama_log = logging.getLogger("localinfer.backends.llamacpp.model")
    llama_log.addHandler(sizes)
    llama_log.setLevel(logging.DEBUG)
    sizes.making = "localinfer"
    ours = [LlamaModel.load(localinfer_spec(args)) for _ in range(args.instances)]  # (also routes llama.cpp's log)
    model = ours[0].model
    batch = lc.llama_batch_init(2048, 0, 1)
    measures: dict[str, Callable[[list[int]], float]] = {}
    for i in range(1, args.instances + 1):  # each configuration's contexts side by side (module docstring)
        for name, changes in SERVER_CHANGES.items():
            if name in configs:
                sizes.making = name
                ctx = server_context(model, args, **changes)
                if name == "llama-server":
                    attach_threadpool(ctx, args.threads)
                measures[f"{name}#{i}"] = functools.partial(prefill, ctx, batch, n_batch=2048)
        if "localinfer" in configs:
            measures[f"localinfer#{i}"] = functools.partial(prefill, ours[i - 1].ctx, batch, n_batch=2048)
    sizes.making = "step-loop"
    step_loop = StepLoopPrefill(localinfer_spec(args)) if "step-loop" in configs else None
    llama_log.removeHandler(sizes)
    if step_loop is not None:
        measures["step-loop"] = step_loop
    n_vocab = int(lc.llama_vocab_n_tokens(ours[0].vocab))
    results = {str(n): measure_all(measures, n, n_vocab, args.rounds) for n in args.tokens}
    if step_loop is not None:
        step_loop.close()
    fill = fill_ms(batch, max(args.tokens))
    print(f"filling {max(args.tokens)} tokens into batches: {fill:.2f} ms", file=sys.stderr)
    report = {"model": str(args.model), "fa": args.fa, "gpu_layers": args.gpu_layers, "threads": args.threads}
    report |= {"rounds": args.rounds, "instances": args.instances, "results": results, "fill_ms": fill}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0


def measure_all(measures: dict[str, Callable[[list[int]], float]], n: int, n_vocab: int, rounds: int) -> dict[str, Any]:
    """Each measure's prefill of ``n`` random token ids in ``rounds`` rounds (after one that warms up), the order
    reversed every other round; medians, spreads and speed against the first measure's."""
    names = list(measures)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):
        rng = random.Random(r * 7 + n)
        tokens = [rng.randrange(1000, n_vocab - 1000) for _ in range(n)]
        for name in names if r % 2 == 0 else names[::-1]:
            ms = measures[name](tokens)
            if r:
                times[name].append(ms)
    base = statistics.median(times[names[0]])
    rows: dict[str, dict[str, Any]] = {
        name: {"median_ms": statistics.median(t), "spread_ms": [min(t), max(t)], "speed": base / statistics.median(t)}
        for name, t in times.items()
    }
    for name, row in rows.items():
        low, high = row["spread_ms"]
        print(
            f"{n} tokens  {name:16s} {row['median_ms']:9.1f} ms  ({low:.1f}-{high:.1f})  {row['speed']:.2f}x",
            file=sys.stderr,
        )
    return rows


def fill_ms(batch: Any, n: int, rounds: int = 5) -> float:
    """The step loop's Python work alone for ``n`` tokens: writing them into the batch, the median of ``rounds``."""
    tokens = [1] * n

    def once() -> float:
        started = time.perf_counter()
        for start in range(0, n, 2048):
            fill(batch, tokens, start, 2048)
        return (time.perf_counter() - started) * 1000.0

    return statistics.median(once() for _ in range(rounds))


if __name__ == "__main__":
    sys.exit(main())
