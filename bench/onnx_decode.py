"""Single-stream decode throughput of one model two ways: its GGUF on llama.cpp and its ONNX build on
onnxruntime-genai, both through localinfer, measured the same way.

- ``in-process``: localinfer's own backends (LlamaCppBackend, OnnxBackend) driven directly, no HTTP: the
  engines' speed as localinfer runs them.
- ``serve``: ``localinfer serve`` of each, one streamed ``/v1/completions`` request per run, as ``decode.py``
  measures servers.

Every run is greedy with ``ignore_eos`` and ``--max-tokens`` tokens from a fresh prompt prefix; decode tok/s =
(tokens - 1) / (time from the first to the last chunk with text). The median of ``--runs`` runs is reported,
after ``--warmup`` unmeasured ones. Run by hand, not in CI.

Usage: .venv/bin/python bench/onnx_decode.py --gguf PATH.gguf --onnx ONNX_FOLDER [--threads 2]
       (an ONNX folder from ``localinfer convert PATH.gguf --to onnx``; ``--modes in-process,serve``)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    HOST,
    RESULTS_DIR,
    ManagedServer,
    free_port,
    greedy_body,
    install_sigterm_handler,
    machine_info,
    stream_completion,
    write_json,
)
from localinfer.backends.base import Backend, LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.onnx.backend import OnnxBackend
from localinfer.types import GenerationOptions, GenerationRequest, SamplingParams

MODES = ("in-process", "serve")
PROMPT = (
    "The history of computing is a story of machines that became smaller, faster and cheaper. "
    "Write a long, detailed essay about how that happened, decade by decade."
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, required=True, help="the GGUF file")
    ap.add_argument("--onnx", type=Path, required=True, help="its ONNX build: the folder with genai_config.json")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="compute threads (default: all)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens to generate per run (default 128)")
    ap.add_argument("--runs", type=int, default=3, help="measured runs per engine; median reported")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs per engine first (default 1)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    ap.add_argument("--localinfer", type=Path, default=Path(sys.executable).parent / "localinfer")
    ap.add_argument("--out", type=Path, help="JSON output (default: bench/results/onnx-decode-<gguf stem>.json)")
    args = ap.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(args.modes) - set(MODES):
        ap.error(f"unknown mode(s): {', '.join(sorted(set(args.modes) - set(MODES)))}")
    if not args.gguf.is_file() or not (args.onnx / "genai_config.json").is_file():
        ap.error("--gguf must be a file and --onnx a folder with genai_config.json")
    return args


async def in_process_run(backend: Backend, max_tokens: int) -> tuple[float, int]:
    """One greedy request straight to ``backend``: (decode tok/s, tokens)."""
    options = GenerationOptions(sampling=SamplingParams(temperature=0), max_tokens=max_tokens, ignore_eos=True)
    request = GenerationRequest(secrets.token_hex(4), f"{secrets.token_hex(4)}\n{PROMPT}", options)
    first = last = 0.0
    tokens = 0
    async for chunk in backend.generate(request):
        if chunk.text:
            last = time.perf_counter()
            first = first or last
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return ((tokens - 1) / (last - first) if last > first else 0.0), tokens


async def in_process(engine: str, backend: Backend, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    await backend.load(LoadSpec(path=path, ctx_size=4096, threads=args.threads, parallel=1))
    try:
        runs = []
        for i in range(args.warmup + args.runs):
            tps, tokens = await in_process_run(backend, args.max_tokens)
            if i >= args.warmup:
                runs.append(tps)
                print(f"[in-process {engine}] run {len(runs)}: {tps:.1f} tok/s, {tokens} tokens", file=sys.stderr)
    finally:
        await backend.unload()
    return {"tok_s": statistics.median(runs), "runs": runs}


def serve(engine: str, model: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    cmd = [str(args.localinfer), "serve", str(model), "--host", HOST, "--port", str(port)]
    cmd += ["--threads", str(args.threads)]
    log_path = RESULTS_DIR / "logs" / f"onnx-decode-{engine}-{args.gguf.stem}.log"
    print(f"[serve {engine}] {' '.join(cmd)}", file=sys.stderr)
    runs = []
    with ManagedServer(engine, cmd, port, log_path) as server, httpx.Client() as client:
        base = greedy_body(server.model_id(model.stem), args.max_tokens)
        for i in range(args.warmup + args.runs):
            stats = stream_completion(client, server.base_url, {**base, "prompt": f"{secrets.token_hex(4)}\n{PROMPT}"})
            if i >= args.warmup:
                runs.append(stats)
                print(f"[serve {engine}] run {len(runs)}: {stats.decode_tps:.1f} tok/s", file=sys.stderr)
    return {
        "tok_s": statistics.median(r.decode_tps for r in runs),
        "ttft_ms": statistics.median(r.ttft_s * 1000 for r in runs),
        "runs": [r.decode_tps for r in runs],
        "command": cmd,
    }


def main(argv: list[str] | None = None) -> int:
    install_sigterm_handler()
    args = parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    engines: list[tuple[str, Path, type[Backend]]] = [
        ("llamacpp", args.gguf, LlamaCppBackend),
        ("onnx", args.onnx, OnnxBackend),
    ]
    for engine, path, backend_class in engines:
        if "in-process" in args.modes:
            results[f"in-process {engine}"] = asyncio.run(in_process(engine, backend_class(), path, args))
        if "serve" in args.modes:
            results[f"serve {engine}"] = serve(engine, path, args)
    lines = ["| engine | decode tok/s | vs llama.cpp |", "|---|---:|---:|"]
    for name, result in results.items():
        reference = results.get(name.replace("onnx", "llamacpp"), {}).get("tok_s")
        ratio = f"{result['tok_s'] / reference:.2f}" if reference else "-"
        lines.append(f"| {name} | {result['tok_s']:.1f} | {ratio} |")
    print("\n".join(lines))
    out = args.out or RESULTS_DIR / f"onnx-decode-{args.gguf.stem}.json"
    write_json(
        out,
        {
            "gguf": str(args.gguf),
            "onnx": str(args.onnx),
            "threads": args.threads,
            "max_tokens": args.max_tokens,
            "machine": machine_info(),
            "results": results,
        },
    )
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
