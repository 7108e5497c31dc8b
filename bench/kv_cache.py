"""A q8_0 KV cache against f16: decode tok/s in localinfer and llama-server, and the perplexity it costs.

Engines, started once and alive together, each on the same model file with one slot, the same threads and
context: `localinfer-f16`, `localinfer-q8_0` (`serve -ctk q8_0 -ctv q8_0`), `llama-server-f16` and
`llama-server-q8_0` (`-ctk q8_0 -ctv q8_0`). Each round sends every engine, in an order that rotates, the same
greedy request: a document (~1,000 tokens by default, `--prompt-chars`) and a 200-token reply (`ignore_eos`), with a
line naming the round first so no cache shortens it. Reported: median decode tok/s and prompt tok/s (prompt tokens
over the time to the first token, seen by the client) with the min-max over rounds, and q8_0 / f16 per engine for
both, computed within each round. On a CPU the two move apart: a quantized cache takes ggml's row-by-row flash
attention for a prompt (its tiled kernel is for f16 and f32 caches only), and its one-token steps accumulate values
in f32 where an f16 cache accumulates in f16.

Perplexity: `llama-perplexity` on the quantize command's default text, f16 against q8_0 keys and values (the KV
cache type is llama.cpp's; localinfer's cache is the same code). The KV cache's bytes per slot are measured in
tests/app/server/test_kv_cache_types.py (q8_0 <= 55 % of f16).

Usage: .venv/bin/python bench/kv_cache.py --model PATH.gguf [--rounds 5] [--tokens 200] [--prompt-chars 4000]
    [--plot PNG]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    REPO_ROOT,
    RESULTS_DIR,
    BenchError,
    ManagedServer,
    free_port,
    install_sigterm_handler,
    llama_cpp_bin,
    machine_info,
    stream_openai,
    write_json,
)

TEXT = REPO_ROOT / "src" / "localinfer" / "quantize" / "data" / "default.txt"
TYPES = ("f16", "q8_0")


def start_servers(args: argparse.Namespace, bin_dir: Path) -> dict[str, ManagedServer]:
    logs = RESULTS_DIR / "logs"
    localinfer = REPO_ROOT / ".venv" / "bin" / "localinfer"
    servers: dict[str, ManagedServer] = {}
    for kv in TYPES:
        port = free_port()
        cmd = [str(localinfer), "serve", str(args.model), "--port", str(port), "--threads", str(args.threads)]
        cmd += ["--parallel", "1", "--ctx-size", str(args.ctx), "--spec", "off", "-ctk", kv, "-ctv", kv]
        servers[f"localinfer-{kv}"] = ManagedServer(f"localinfer-{kv}", cmd, port, logs / f"kv-localinfer-{kv}.log")
        port = free_port()
        cmd = [str(bin_dir / "llama-server"), "-m", str(args.model), "-t", str(args.threads), "-np", "1"]
        cmd += ["-c", str(args.ctx), "--host", "127.0.0.1", "--port", str(port), "-ctk", kv, "-ctv", kv]
        servers[f"llama-server-{kv}"] = ManagedServer(f"llama-server-{kv}", cmd, port, logs / f"kv-llama-{kv}.log")
    for server in servers.values():
        server.start()
    return servers


def perplexity(bin_dir: Path, args: argparse.Namespace, kv: str) -> float:
    command = [str(bin_dir / "llama-perplexity"), "-m", str(args.model), "-f", str(TEXT), "-c", "512"]
    command += ["--chunks", str(args.chunks), "-t", str(args.threads), "-ctk", kv, "-ctv", kv]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    found = re.search(r"Final estimate: PPL = ([0-9.]+)", done.stdout + done.stderr)
    if found is None:
        raise RuntimeError(f"no perplexity in llama-perplexity's output: {done.stderr[-500:]}")
    return float(found.group(1))


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> int:
    install_sigterm_handler()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--prompt-chars", type=int, default=4000, help="characters of the document (4 a token or so)")
    p.add_argument("--chunks", type=int, default=8, help="perplexity chunks of 512 tokens")
    p.add_argument("--llama-cpp-bin", type=Path)
    p.add_argument("--plot", type=Path)
    p.add_argument("--name", help="the model's name in the plot's title (default: the file's)")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    bin_dir = llama_cpp_bin(args.llama_cpp_bin)
    document = TEXT.read_text(encoding="utf-8")[: args.prompt_chars]
    servers = start_servers(args, bin_dir)
    names = list(servers)
    tps: dict[str, list[float]] = {n: [] for n in names}
    prompt_tps: dict[str, list[float]] = {n: [] for n in names}
    try:
        with httpx.Client(timeout=600.0) as client:
            for round_no in range(args.rounds + 1):  # round 0 warms every engine up and is not counted
                order = names[round_no % len(names) :] + names[: round_no % len(names)]
                body = {
                    "prompt": f"Request {round_no}.\n{document}\n\nIn other words,",
                    "max_tokens": args.tokens,
                    "temperature": 0,
                    "ignore_eos": True,
                    "stream_options": {"include_usage": True},
                }
                for name in order:
                    stats = stream_openai(client, servers[name].base_url, "/v1/completions", body)
                    if round_no:
                        tps[name].append(stats.decode_tps)
                        if not stats.prompt_tokens:
                            raise BenchError(f"{name} reported no prompt tokens in its usage")
                        prompt_tps[name].append(stats.prompt_tokens / stats.ttft_s)
                print(f"round {round_no} done", file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
    rounds = range(args.rounds)
    engines = ("localinfer", "llama-server")
    report: dict[str, Any] = {
        "tok_s": {n: spread(v) for n, v in tps.items()},
        "q8_0/f16": {
            engine: spread([tps[f"{engine}-q8_0"][i] / tps[f"{engine}-f16"][i] for i in rounds]) for engine in engines
        },
        "prompt_tok_s": {n: spread(v) for n, v in prompt_tps.items()},
        "prompt q8_0/f16": {
            engine: spread([prompt_tps[f"{engine}-q8_0"][i] / prompt_tps[f"{engine}-f16"][i] for i in rounds])
            for engine in engines
        },
        "perplexity": {kv: perplexity(bin_dir, args, kv) for kv in TYPES},
    }
    payload = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, **report}
    write_json(args.out or RESULTS_DIR / f"kv-cache-{args.model.stem}.json", payload)
    print(render(report, names))
    if args.plot:
        plot(report, names, args.plot, args.name or args.model.stem)
    return 0


def render(report: dict[str, Any], names: list[str]) -> str:
    def cell(s: dict[str, float], digits: int) -> str:
        return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"

    lines = ["| engine | decode tok/s (median, min-max) | prompt tok/s (median, min-max) |", "|---|---|---|"]
    for name in names:
        lines.append(f"| {name} | {cell(report['tok_s'][name], 1)} | {cell(report['prompt_tok_s'][name], 1)} |")
    lines += ["", "| engine | q8_0 / f16 decode (min-max) | q8_0 / f16 prompt (min-max) |", "|---|---|---|"]
    for engine, s in report["q8_0/f16"].items():
        lines.append(f"| {engine} | {cell(s, 2)} | {cell(report['prompt q8_0/f16'][engine], 2)} |")
    ppl = report["perplexity"]
    lines += ["", f"perplexity f16 {ppl['f16']:.4f}, q8_0 {ppl['q8_0']:.4f} ({ppl['q8_0'] / ppl['f16'] - 1:+.2%})"]
    return "\n".join(lines)


def plot(report: dict[str, Any], names: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in zip(axes, ("tok_s", "prompt_tok_s"), ("decode", "prompt"), strict=True):
        stats = [report[key][n] for n in names]
        medians = [s["median"] for s in stats]
        errors = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]
        ax.bar(names, medians, yerr=errors, capsize=4, color=["C0", "C1", "C0", "C1"])
        ax.set_ylabel(f"{label} tok/s (median, min-max)")
        ax.tick_params(axis="x", labelrotation=15)
    ppl = report["perplexity"]
    fig.suptitle(f"KV cache f16 vs q8_0: {title} (PPL {ppl['f16']:.3f} vs {ppl['q8_0']:.3f})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
