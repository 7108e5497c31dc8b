"""What mixing LoRA adapter scales costs: 4 streams at once, all at one scale or half at scale 0 and half at 1.

llama.cpp applies adapters to a whole context, so requests of different scales cannot share a decode: llama-server
batches only slots whose adapters are equal (the first busy slot's set, each step), localinfer takes each set in
turn (backends/llamacpp/lora.py), and each change of set makes llama.cpp reserve its compute graph again. Both
servers get the same model, adapter and flags (``-c 2048 -np 4 --lora FILE``); each round streams ``--streams``
greedy /v1/completions of ``--tokens`` tokens at once, with a per-request ``lora`` of every stream at 1 ("same")
or alternating 0 and 1 ("mixed"). Reported per server: aggregate tok/s of each, mixed / same, and localinfer's /
llama-server's.

Usage: .venv/bin/python bench/lora.py --model PATH.gguf --lora ADAPTER.gguf [--threads 2] [--rounds 3]
       [--streams 4] [--tokens 64]
(tests/lora_model.py derives the SmolLM2 adapter: the tests put it in the test home's lora/ folder.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from benchlib import (
    RESULTS_DIR,
    ManagedServer,
    free_port,
    greedy_body,
    install_sigterm_handler,
    llama_cpp_bin,
    machine_info,
    stream_concurrently,
    write_json,
)

PROMPT = "Write a short story about a lighthouse keeper who"


def bodies(model: str, args: argparse.Namespace, mixed: bool) -> list[dict[str, Any]]:
    return [
        greedy_body(
            model, args.tokens, prompt=PROMPT, lora=[{"id": 0, "scale": float(i % 2) if mixed else 1.0}], seed=i
        )
        for i in range(args.streams)
    ]


def measure(server: ManagedServer, args: argparse.Namespace) -> dict[str, Any]:
    model = server.model_id("model")
    stream_concurrently(server.base_url, bodies(model, args, False)[:1])  # warm up: the model is loaded
    rates: dict[str, list[float]] = {"same": [], "mixed": []}
    for _ in range(args.rounds):
        for kind in ("same", "mixed"):
            wall, stats = stream_concurrently(server.base_url, bodies(model, args, kind == "mixed"))
            rates[kind].append(sum(s.tokens for s in stats) / wall)
    same, mixed = statistics.median(rates["same"]), statistics.median(rates["mixed"])
    return {"same_tps": same, "mixed_tps": mixed, "mixed_over_same": mixed / same, "rounds": rates}


def main() -> int:
    install_sigterm_handler()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--lora", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--llama-cpp-bin", type=Path)
    args = p.parse_args()
    flags = ["-c", "2048", "-np", str(args.streams), "-t", str(args.threads), "--lora", str(args.lora)]
    results: dict[str, Any] = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}}
    servers = {
        "llama-server": [str(llama_cpp_bin(args.llama_cpp_bin) / "llama-server"), "-m", str(args.model), *flags],
        "localinfer": [sys.executable, "-m", "localinfer.app.cli", "serve", str(args.model), *flags, "--spec", "off"],
    }
    for name, command in servers.items():
        port = free_port()
        cmd = [*command, "--host", "127.0.0.1", "--port", str(port)]
        with ManagedServer(name, cmd, port, RESULTS_DIR / "logs" / f"lora-{name}.log") as server:
            results[name] = measure(server, args)
        r = results[name]
        print(f"{name}: same {r['same_tps']:.1f} tok/s, mixed {r['mixed_tps']:.1f} tok/s ({r['mixed_over_same']:.2f}x)")
    for kind in ("same", "mixed"):
        ratio = results["localinfer"][f"{kind}_tps"] / results["llama-server"][f"{kind}_tps"]
        results[f"{kind}_ratio"] = ratio
        print(f"{kind}: localinfer / llama-server = {ratio:.2f}")
    write_json(RESULTS_DIR / "lora.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
