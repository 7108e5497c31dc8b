"""What a constrained token costs: free text vs llguidance (what localinfer ships) vs llama.cpp's GBNF grammar.

In-process, no HTTP: one model, one sequence, the same prompt, greedy, for each mode in turn and `--rounds`
times over. Each round clears the cache, builds the mode's sampler chain (the llguidance one through
localinfer's own `ConstraintCompiler` and `build_sampler`; the GBNF one from the same JSON schema through
llama-cpp-python's `json_schema_to_gbnf` and `llama_sampler_init_grammar`, the path localinfer used before),
evaluates the prompt and generates up to `--max-tokens` tokens, one `llama_decode` per token; the modes take
turns within each round. It times, per generated token, the sampler call alone (`llama_sampler_sample`: the
mask, the penalties, the pick), in wall time and in this thread's CPU time (which a busy neighbour disturbs
less), and the whole step (sample + decode), and reports min / median / max over the rounds, plus the time to
build the sampler (the schema compile). A constrained round ends early when its grammar is complete; the figures are
per token, so rounds of different lengths compare.

Usage: .venv/bin/python bench/constrained.py --model PATH [--threads 2] [--rounds 5] [--max-tokens 96]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp.llama_cpp as lc
from llama_cpp.llama_grammar import json_schema_to_gbnf

from benchlib import RESULTS_DIR, machine_info, write_json
from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.constraint import ConstraintCompiler
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.sampling import build_sampler
from localinfer.types import ResponseFormat, SamplingParams

MODES = ("free", "llguidance", "gbnf")
PROMPT = (
    "<|im_start|>user\nList twenty fruits and their colours as a JSON array of objects with the keys "
    '"name" and "colour".<|im_end|>\n<|im_start|>assistant\n'
)
SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "colour": {"type": "string"}},
        "required": ["name", "colour"],
        "additionalProperties": False,
    },
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="GGUF file")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="compute threads (default: all)")
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds per mode (default 5)")
    ap.add_argument("--max-tokens", type=int, default=96, help="tokens to generate per round at most (default 96)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "constrained.json", help="where the JSON goes")
    return ap.parse_args(argv)


class Bench:
    def __init__(self, model: LlamaModel) -> None:
        assert model.ctx is not None
        self.model = model
        self.ctx = model.ctx
        self.memory = lc.llama_get_memory(model.ctx)
        self.n_vocab = int(lc.llama_vocab_n_tokens(model.vocab))
        self.prompt = model.tokenize(PROMPT, add_special=True, parse_special=True)
        self.compiler = ConstraintCompiler(model.vocab)
        self.compiler.tokenizer()  # built once per model in the server too: not part of any round

    def sampler(self, mode: str) -> tuple[lc.llama_sampler_p, Callable[[], bool]]:
        """The mode's chain and a check that says its grammar is complete."""
        greedy = SamplingParams(temperature=0)
        if mode == "free":
            return build_sampler(self.n_vocab, greedy), lambda: False
        if mode == "llguidance":
            constraint = self.compiler.compile(ResponseFormat("json_schema", SCHEMA))
            assert constraint is not None
            return build_sampler(self.n_vocab, greedy, constraint), lambda: constraint.done
        chain = build_sampler(self.n_vocab, greedy)
        grammar = json_schema_to_gbnf(json.dumps(SCHEMA))
        gbnf = lc.llama_sampler_init_grammar(self.model.vocab, grammar.encode(), b"root")
        assert gbnf, "llama.cpp refused the GBNF grammar"
        # The grammar goes first, as it did in localinfer's chain: rebuild the chain around it.
        lc.llama_sampler_free(chain)
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        lc.llama_sampler_chain_add(chain, gbnf)
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        return chain, lambda: False

    def decode(self, tokens: list[int]) -> None:
        array = (lc.llama_token * len(tokens))(*tokens)
        if lc.llama_decode(self.ctx, lc.llama_batch_get_one(array, len(tokens))) != 0:
            raise RuntimeError("llama_decode failed")

    def round(self, mode: str, max_tokens: int) -> dict[str, Any]:
        lc.llama_memory_clear(self.memory, True)
        t0 = time.perf_counter()
        sampler, complete = self.sampler(mode)
        build_ms = (time.perf_counter() - t0) * 1000
        try:
            self.decode(self.prompt)
            sample_s = sample_cpu_s = step_s = 0.0
            text = b""
            n = 0
            while n < max_tokens:
                t0, c0 = time.perf_counter(), time.thread_time()
                token = lc.llama_sampler_sample(sampler, self.ctx, -1)
                t1, c1 = time.perf_counter(), time.thread_time()
                n += 1
                sample_s += t1 - t0
                sample_cpu_s += c1 - c0
                text += self.model.token_bytes(token)
                if complete() or (mode != "free" and self.model.is_eog(token)):
                    step_s += t1 - t0
                    break
                self.decode([token])
                step_s += time.perf_counter() - t0
        finally:
            lc.llama_sampler_free(sampler)
        return {
            "tokens": n,
            "sample_us_per_token": sample_s / n * 1e6,
            "sample_cpu_us_per_token": sample_cpu_s / n * 1e6,
            "step_ms_per_token": step_s / n * 1e3,
            "build_ms": build_ms,
            "text": text.decode("utf-8", errors="replace"),
        }


FIGURES = ("sample_us_per_token", "sample_cpu_us_per_token", "step_ms_per_token", "build_ms")


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model = LlamaModel.load(LoadSpec(path=args.model, ctx_size=1024, parallel=1, threads=args.threads))
    try:
        bench = Bench(model)
        for mode in MODES:
            bench.round(mode, 8)  # warm-up
        # Modes take turns within each round, so that a neighbour's burst of load spreads over all of them.
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                runs[mode].append(bench.round(mode, args.max_tokens))
        results: dict[str, Any] = {
            mode: {
                "tokens": [r["tokens"] for r in rounds],
                **{key: spread([r[key] for r in rounds]) for key in FIGURES},
                "text": rounds[0]["text"],
            }
            for mode, rounds in runs.items()
        }
    finally:
        model.free()
    print("min / median / max over rounds, per generated token; build: the sampler chain, schema compile included")
    print(f"{'mode':<11} {'tokens':>6} {'sample us (wall)':>22} {'sample us (CPU)':>22} ", end="")
    print(f"{'step ms':>20} {'build ms':>9}")
    for mode, r in results.items():
        wall, cpu, step, build = (r[key] for key in FIGURES)
        print(
            f"{mode:<11} {statistics.median(r['tokens']):>6.0f} "
            f"{wall['min']:>7.0f}{wall['median']:>7.0f}{wall['max']:>8.0f} "
            f"{cpu['min']:>7.0f}{cpu['median']:>7.0f}{cpu['max']:>8.0f} "
            f"{step['min']:>6.1f}{step['median']:>7.1f}{step['max']:>7.1f} {build['median']:>9.1f}"
        )
    for mode, r in results.items():
        print(f"{mode}: {r['text'][:120]!r}")
    write_json(args.out, {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
