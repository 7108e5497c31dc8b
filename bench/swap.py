"""Load and swap times: how long a request waits for its model when the scheduler must load it.

One `localinfer serve` started with no model and `--max-loaded 1`, two models. Each round asks model A (a cold load
the first time, a re-load after eviction afterwards), then model B (which evicts A first), with Ollama's
/api/generate and no prompt, which only loads the model and reports `load_duration`. Reported per model: the
first (cold) load, and the median and spread of the loads after an eviction, with the wall time of the request.

Ollama's published behaviour for comparison: a model loads on its first request and stays 5 minutes
(OLLAMA_KEEP_ALIVE); OLLAMA_MAX_LOADED_MODELS caps how many are loaded; a swap unloads the least recently used.

Usage: .venv/bin/python bench/swap.py --home ~/.cache/localinfer/test-home \
       --models smollm2,gemma3-270m-q4-k-m [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib import RESULTS_DIR, ManagedServer, free_port, install_sigterm_handler, machine_info, write_json


def load(client: httpx.Client, url: str, model: str) -> tuple[float, float]:
    """(load_duration ms as the server reports it, wall ms of the request)."""
    started = time.perf_counter()
    response = client.post(f"{url}/api/generate", json={"model": model, "prompt": "", "stream": False})
    response.raise_for_status()
    wall = (time.perf_counter() - started) * 1000
    return response.json()["load_duration"] / 1e6, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="a localinfer home holding both models")
    parser.add_argument("--models", default="smollm2,gemma3-270m-q4-k-m", help="two model names, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    install_sigterm_handler()
    first, second = args.models.split(",")
    port = free_port()
    command = [sys.executable, "-m", "localinfer.app.cli", "serve", "--port", str(port), "--max-loaded", "1"]
    command += ["--ctx-size", str(2 * 2048), "--parallel", "2", "--threads", str(args.threads)]  # 2048 a slot
    os.environ["LOCALINFER_HOME"] = str(args.home)
    loads: dict[str, list[tuple[float, float]]] = {first: [], second: []}
    with (
        ManagedServer("localinfer", command, port, RESULTS_DIR / "logs" / "swap.log") as server,
        httpx.Client(timeout=600.0) as client,
    ):
        for _ in range(args.rounds):
            for model in (first, second):
                loads[model].append(load(client, server.base_url, model))
    summary: dict[str, Any] = {}
    print("| model | cold load ms (wall) | re-load after eviction ms: median (min-max) | wall median ms |")
    print("|---|---:|---:|---:|")
    for model, times in loads.items():
        cold, again = times[0], times[1:]
        reported = [t[0] for t in again]
        summary[model] = {
            "cold_ms": cold[0],
            "cold_wall_ms": cold[1],
            "reload_ms_median": statistics.median(reported),
            "reload_ms_min": min(reported),
            "reload_ms_max": max(reported),
            "reload_wall_ms_median": statistics.median(t[1] for t in again),
        }
        s = summary[model]
        print(
            f"| {model} | {s['cold_ms']:.0f} ({s['cold_wall_ms']:.0f}) | {s['reload_ms_median']:.0f} "
            f"({s['reload_ms_min']:.0f}-{s['reload_ms_max']:.0f}) | {s['reload_wall_ms_median']:.0f} |"
        )
    write_json(
        RESULTS_DIR / "swap.json",
        {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, "summary": summary},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
