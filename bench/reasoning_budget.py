"""What a thinking budget costs and saves: a budgeted reply against an unbudgeted one, on localinfer and on
llama-server, the same reasoning model, the same greedy requests.

The model is the tests' reasoning model (SmolLM2 made one, tests/reasoning_model.py: its template opens the
thinking and it never closes it itself), derived from `--model` into the results folder unless `--think-model`
names it. Each round streams, to each server in turn, `/v1/chat/completions` with `max_tokens` M and `ignore_eos`
(every reply is M tokens long): unbudgeted (the whole reply is thinking, no answer comes) and with
`reasoning_budget_tokens` N (N thinking tokens, then the model's end of thinking written in its place, then the
answer). Per request it records the tokens of thinking and
of answer (what the stream's deltas carried: llama-server and localinfer both send `reasoning_content`), the time
to the first thinking and the first answer token, the whole time, and the server's own decode rate
(`timings.predicted_per_second`); it reports min / median / max over the rounds and, per mode, localinfer's rate
as a ratio of llama-server's. The budget's own cost is the decode rate budgeted against unbudgeted on the same
server (a forced token skips sampling, so it should cost nothing).

Usage: .venv/bin/python bench/reasoning_budget.py --model SMOLLM2.gguf [--rounds 5] [--max-tokens 64] [--budget 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    HOST,
    REPO_ROOT,
    RESULTS_DIR,
    BenchError,
    ManagedServer,
    free_port,
    llama_cpp_bin,
    machine_info,
    write_json,
)

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def reasoning_model(source: Path, folder: Path) -> Path:
    """The tests' reasoning model derived from ``source`` into ``folder`` (once)."""
    sys.path.insert(0, str(REPO_ROOT))
    from tests.reasoning_model import write_reasoning_copy

    target = folder / "smollm2-think.gguf"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        write_reasoning_copy(source, partial)
        partial.replace(target)
    return target


def one_reply(base_url: str, body: dict[str, Any]) -> dict[str, float]:
    """Stream one chat reply; its thinking and answer tokens (the deltas that carried each), times, decode rate."""
    counts = {"thinking": 0, "answer": 0}
    first: dict[str, float] = {}
    timings: dict[str, Any] = {}
    sent = time.perf_counter()
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json={**body, "stream": True}, timeout=600) as r:
        if r.status_code != 200:
            r.read()
            raise BenchError(f"{base_url}: {r.status_code} {r.text[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            timings = event.get("timings") or timings
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                for part, key in (("thinking", "reasoning_content"), ("answer", "content")):
                    if delta.get(key):
                        counts[part] += 1
                        first.setdefault(part, time.perf_counter() - sent)
    return {
        "thinking_deltas": counts["thinking"],
        "answer_deltas": counts["answer"],
        "first_thinking_s": first.get("thinking", float("nan")),
        "first_answer_s": first.get("answer", float("nan")),
        "total_s": time.perf_counter() - sent,
        "decode_tps": float(timings.get("predicted_per_second", 0.0)),
        "predicted_n": float(timings.get("predicted_n", 0)),
    }


def spread(values: list[float]) -> dict[str, float]:
    values = [v for v in values if v == v]  # NaN: the reply had no such part
    if not values:
        return {}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="SmolLM2-135M-Instruct GGUF to derive from")
    parser.add_argument("--think-model", type=Path, help="the reasoning model itself (skips deriving)")
    parser.add_argument("--llama-bin", type=Path, help="folder with llama-server (default: bench/build-llama-cpp)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    folder = RESULTS_DIR / "reasoning-budget"
    model = args.think_model or reasoning_model(args.model, folder)
    common = ["-c", "4096", "-np", "1", "-t", str(args.threads)]
    port, lport = free_port(), free_port()
    llama = [str(llama_cpp_bin(args.llama_bin) / "llama-server"), "-m", str(model), "--jinja", "--host", HOST]
    ours = [sys.executable, "-m", "localinfer.app.cli", "serve", str(model), "--spec", "off"]
    servers = {
        "llama-server": ManagedServer(
            "llama-server", [*llama, "--port", str(port), *common], port, folder / "llama-server.log"
        ),
        "localinfer": ManagedServer("localinfer", [*ours, "--port", str(lport), *common], lport, folder / "li.log"),
    }
    # ignore_eos: the model would end its turn after a dozen tokens; every reply runs its whole max_tokens
    base = {"messages": MESSAGES, "temperature": 0, "max_tokens": args.max_tokens, "cache_prompt": False}
    base["ignore_eos"] = True
    modes = {"unbudgeted": base, "budgeted": {**base, "reasoning_budget_tokens": args.budget}}
    samples: dict[str, dict[str, list[dict[str, float]]]] = {s: {m: [] for m in modes} for s in servers}
    for name, server in servers.items():
        with server:
            for body in modes.values():
                one_reply(server.base_url, body)  # warm-up: the model's first decodes are slower
            for _ in range(args.rounds):
                for mode, body in modes.items():
                    samples[name][mode].append(one_reply(server.base_url, body))
    report: dict[str, Any] = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}}
    for name, by_mode in samples.items():
        for mode, rows in by_mode.items():
            report[f"{name}/{mode}"] = {key: spread([r[key] for r in rows]) for key in rows[0]}
    for mode in modes:
        ratios = [
            ours["decode_tps"] / theirs["decode_tps"]
            for ours, theirs in zip(samples["localinfer"][mode], samples["llama-server"][mode], strict=True)
            if theirs["decode_tps"] > 0
        ]
        report[f"decode ratio localinfer/llama-server {mode}"] = spread(ratios)
    for name in servers:
        ratios = [
            b["decode_tps"] / u["decode_tps"]
            for b, u in zip(samples[name]["budgeted"], samples[name]["unbudgeted"], strict=True)
            if u["decode_tps"] > 0
        ]
        report[f"{name} decode budgeted/unbudgeted"] = spread(ratios)
    write_json(folder / "report.json", report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
