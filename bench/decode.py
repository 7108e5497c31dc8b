"""Single-stream decode throughput: llama-bench vs llama.cpp's llama-server vs `localinfer serve`.

All three run on the same GGUF file with the same thread count, in one invocation:

- llama-bench `-p 0 -n N`: llama.cpp's own decode speed with no HTTP in the way (the ceiling);
- llama-server and localinfer: one streamed `/v1/completions` request per run (`temperature 0`,
  `ignore_eos: true`, `max_tokens N`), timed on the client: decode tok/s = (tokens after the first) /
  (time from the first to the last streamed token), plus time to first token. Each run uses a fresh prompt
  prefix, so no prefix cache helps the TTFT; the median of `--runs` runs is reported.

Usage: .venv/bin/python bench/decode.py --model PATH [--threads 2]
       [--engines llama-bench,llama-server,localinfer]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    HOST,
    REPO_ROOT,
    RESULTS_DIR,
    BenchError,
    ManagedServer,
    StreamStats,
    free_port,
    greedy_body,
    install_sigterm_handler,
    llama_cpp_bin,
    machine_info,
    stream_completion,
    write_json,
)

ENGINES = ("llama-bench", "llama-server", "localinfer")
PROMPT = (
    "The history of computing is a story of machines that became smaller, faster and cheaper. "
    "Write a long, detailed essay about how that happened, decade by decade."
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="GGUF file to load in every engine")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="compute threads (default: all)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens to generate per run (default 128)")
    ap.add_argument("--runs", type=int, default=3, help="measured requests per server; median reported")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured requests per server first (default 1)")
    ap.add_argument("--ctx", type=int, default=4096, help="llama-server context size (-c)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {','.join(ENGINES)}")
    ap.add_argument("--llama-bin", type=Path, help="folder with llama-server/llama-bench (default: build it)")
    ap.add_argument(
        "--localinfer",
        type=Path,
        default=Path(sys.executable).parent / "localinfer",
        help="localinfer executable (default: the one next to this Python)",
    )
    ap.add_argument("--server-arg", action="append", default=[], help="extra llama-server argument (repeat)")
    ap.add_argument("--localinfer-arg", action="append", default=[], help="extra `localinfer serve` argument")
    ap.add_argument("--startup-timeout", type=float, default=180.0, help="seconds to wait for /health")
    ap.add_argument("--out", type=Path, help="JSON output (default: bench/results/decode-<model stem>.json)")
    args = ap.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(args.engines) - set(ENGINES)
    if unknown:
        ap.error(f"unknown engine(s): {', '.join(sorted(unknown))}")
    if not args.model.is_file():
        ap.error(f"no such model file: {args.model}")
    if args.runs < 1 or args.max_tokens < 2:
        ap.error("--runs must be >= 1 and --max-tokens >= 2")
    return args


def run_llama_bench(bin_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        str(bin_dir / "llama-bench"),
        "-m", str(args.model),
        "-t", str(args.threads),
        "-p", "0",
        "-n", str(args.max_tokens),
        "-o", "json",
    ]  # fmt: skip
    print(f"[llama-bench] {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise BenchError(f"llama-bench exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    rows = json.loads(proc.stdout)
    row = next((r for r in rows if r.get("n_gen") == args.max_tokens and r.get("n_prompt") == 0), None)
    if row is None:
        raise BenchError(f"no tg{args.max_tokens} row in llama-bench output: {proc.stdout[:1000]}")
    return {
        "command": cmd,
        "tok_s": float(row["avg_ts"]),
        "stddev_tok_s": float(row.get("stddev_ts", 0.0)),
        "repetitions": len(row.get("samples_ts") or []),
        "build_commit": row.get("build_commit"),
        "cpu_info": row.get("cpu_info"),
        "raw": row,
    }


def server_command(engine: str, bin_dir: Path | None, port: int, args: argparse.Namespace) -> list[str]:
    if engine == "llama-server":
        assert bin_dir is not None
        return [
            str(bin_dir / "llama-server"),
            "-m", str(args.model),
            "--host", HOST,
            "--port", str(port),
            "-t", str(args.threads),
            "-c", str(args.ctx),
            "-np", "1",
            *args.server_arg,
        ]  # fmt: skip
    return [
        str(args.localinfer),
        "serve", str(args.model),
        "--host", HOST,
        "--port", str(port),
        "--threads", str(args.threads),
        *args.localinfer_arg,
    ]  # fmt: skip


def run_server(engine: str, bin_dir: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    cmd = server_command(engine, bin_dir, port, args)
    log_path = RESULTS_DIR / "logs" / f"{engine}-{args.model.stem}.log"
    print(f"[{engine}] {' '.join(cmd)}", file=sys.stderr)
    runs: list[StreamStats] = []
    with ManagedServer(engine, cmd, port, log_path, args.startup_timeout) as server:
        model_id = server.model_id(args.model.stem)
        base = greedy_body(model_id, args.max_tokens)
        with httpx.Client() as client:
            for i in range(args.warmup + args.runs):
                # A random start per request: no prefix cache shortens the prompt work behind the TTFT.
                prompt = f"{secrets.token_hex(4)}\n{PROMPT}"
                stats = stream_completion(client, server.base_url, {**base, "prompt": prompt})
                if i < args.warmup:
                    continue
                runs.append(stats)
                print(
                    f"[{engine}] run {len(runs)}: {stats.decode_tps:.1f} tok/s, "
                    f"TTFT {stats.ttft_s * 1000:.0f} ms, {stats.tokens} tokens "
                    f"({stats.text_chunks} text chunks, usage={stats.usage_tokens})",
                    file=sys.stderr,
                )
    short = [r.tokens for r in runs if r.tokens < args.max_tokens]
    if short:
        print(f"[{engine}] warning: runs ended early ({short} tokens): is ignore_eos honoured?", file=sys.stderr)
    # The server's own decode rate, when it reports one (llama-server's `timings.predicted_per_second`).
    reported = [
        float(r.server_timings["predicted_per_second"])
        for r in runs
        if r.server_timings and r.server_timings.get("predicted_per_second")
    ]
    return {
        "command": cmd,
        "model_id": model_id,
        "tok_s": statistics.median(r.decode_tps for r in runs),
        "ttft_ms": statistics.median(r.ttft_s * 1000 for r in runs),
        "server_reported_tok_s": statistics.median(reported) if reported else None,
        "warning": f"fewer tokens than max_tokens: {short} (ignore_eos ignored?)" if short else None,
        "runs": [{**asdict(r), "decode_tps": r.decode_tps, "tokens": r.tokens, "text": r.text[:200]} for r in runs],
        "log": str(log_path),
    }


def markdown_table(results: dict[str, dict[str, Any]]) -> str:
    ref = results.get("llama-bench", {}).get("tok_s")
    lines = ["| engine | decode tok/s | vs llama-bench | TTFT ms |", "|---|---:|---:|---:|"]
    for engine, res in results.items():
        if "error" in res or "skipped" in res:
            lines.append(f"| {engine} | {res.get('error') or res.get('skipped')} | | |")
            continue
        tps = res["tok_s"]
        ratio = f"{tps / ref:.2f}" if ref else "-"
        ttft = f"{res['ttft_ms']:.0f}" if "ttft_ms" in res else "-"
        lines.append(f"| {engine} | {tps:.1f} | {ratio} | {ttft} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    install_sigterm_handler()
    args = parse_args(argv)
    bin_dir: Path | None = None
    if {"llama-bench", "llama-server"} & set(args.engines):
        bin_dir = llama_cpp_bin(args.llama_bin)

    results: dict[str, dict[str, Any]] = {}
    failed = False
    load_before = os.getloadavg()  # other work on the machine skews every figure: keep a trace of it
    for engine in args.engines:
        if engine == "localinfer" and not os.access(args.localinfer, os.X_OK):
            results[engine] = {"skipped": f"not installed ({args.localinfer})"}
            continue
        try:
            if engine == "llama-bench":
                assert bin_dir is not None
                results[engine] = run_llama_bench(bin_dir, args)
            else:
                results[engine] = run_server(engine, bin_dir, args)
        except (BenchError, httpx.HTTPError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
            failed = True
            print(f"[{engine}] FAILED: {exc}", file=sys.stderr)
            results[engine] = {"error": f"failed: {type(exc).__name__}", "detail": str(exc)[-3000:]}

    info_path = bin_dir / "BUILD-INFO" if bin_dir else None
    payload = {
        "benchmark": "decode",
        "model": str(args.model.resolve()),
        "model_bytes": args.model.stat().st_size,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "runs": args.runs,
        "warmup": args.warmup,
        "ctx": args.ctx,
        "prompt": PROMPT,
        "llama_cpp_bin": str(bin_dir) if bin_dir else None,
        "llama_cpp_build": info_path.read_text() if info_path and info_path.is_file() else None,
        "machine": machine_info(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": results,
    }
    out = args.out or RESULTS_DIR / f"decode-{args.model.stem}.json"
    write_json(out, payload)

    print(f"\n### decode, {args.model.name}, {args.threads} threads, {args.max_tokens} tokens\n")
    print(markdown_table(results))
    if load_before[0] > 0.5:
        print(
            f"\nnote: 1-min load average {load_before[0]:.1f} when this run started (other work, or a run just"
            " before): figures may be low"
        )
    print(f"\nJSON: {out.relative_to(REPO_ROOT) if out.is_relative_to(REPO_ROOT) else out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
