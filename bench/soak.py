"""Soak: `localinfer serve` under steady load for minutes, its memory sampled each minute.

`--clients` threads each stream `/v1/completions` back to back (greedy, `ignore_eos`, `--max-tokens` tokens, a
prompt of its own each time, so the prefix cache keeps changing) until `--minutes` have passed. Every
`--sample-every` seconds the resident memory of the server's process tree is read. Reported: requests completed
and failed, tokens generated, and the RSS samples with their spread (the target: flat within 50 MiB after the
first sample, which includes the model's load and the first prompts). Bounded in time; only 127.0.0.1.

Usage: .venv/bin/python bench/soak.py --model PATH [--clients 16] [--minutes 10] [--threads 2] [--parallel 4]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from benchlib import HOST, RESULTS_DIR, BenchError, ManagedServer, free_port, greedy_body, stream_completion

MIB = 1024 * 1024
WORDS = [
    "river",
    "stone",
    "garden",
    "letter",
    "engine",
    "window",
    "candle",
    "harbor",
    "meadow",
    "signal",
    "lantern",
    "orbit",
]


@dataclass
class Tally:
    completed: int = 0
    failed: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants."""
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def client_loop(base_url: str, model: str, max_tokens: int, deadline: float, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(timeout=120.0) as client:
        while time.monotonic() < deadline:
            prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 64)))
            try:
                stats = stream_completion(client, base_url, greedy_body(model, max_tokens, prompt=prompt), 120.0)
            except (BenchError, httpx.HTTPError) as exc:
                with tally.lock:
                    tally.failed += 1
                    if len(tally.errors) < 5:
                        tally.errors.append(str(exc)[:200])
                continue
            with tally.lock:
                tally.completed += 1
                tally.tokens += stats.tokens


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="GGUF file to serve")
    ap.add_argument("--clients", type=int, default=16, help="concurrent streaming clients (default 16)")
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the load lasts (default 10)")
    ap.add_argument("--sample-every", type=float, default=60.0, help="seconds between RSS samples (default 60)")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per request (default 32)")
    ap.add_argument("--threads", type=int, default=2, help="compute threads (default 2)")
    ap.add_argument("--parallel", type=int, default=4, help="slots (default 4)")
    ap.add_argument("--ctx", type=int, default=2048, help="context tokens per slot (default 2048)")
    ap.add_argument(
        "--localinfer",
        type=Path,
        default=Path(sys.executable).parent / "localinfer",
        help="localinfer executable (default: the one next to this Python)",
    )
    ap.add_argument("--out", type=Path, help="JSON output (default: bench/results/soak-<model stem>.json)")
    args = ap.parse_args(argv)

    port = free_port()
    cmd = [str(args.localinfer), "serve", str(args.model), "--host", HOST, "--port", str(port)]
    # --ctx-size with --parallel is the whole cache, split across the slots as llama-server splits -c
    cmd += [
        "--threads",
        str(args.threads),
        "--parallel",
        str(args.parallel),
        "--ctx-size",
        str(args.ctx * args.parallel),
    ]
    tally = Tally()
    samples: list[tuple[float, int]] = []
    with ManagedServer("localinfer", cmd, port, RESULTS_DIR / "soak-server.log") as server:
        model = server.model_id(args.model.stem)
        start = time.monotonic()
        deadline = start + args.minutes * 60.0
        clients = [
            threading.Thread(
                target=client_loop, args=(server.base_url, model, args.max_tokens, deadline, tally, i), daemon=True
            )
            for i in range(args.clients)
        ]
        for client in clients:
            client.start()
        next_sample = start + args.sample_every
        while time.monotonic() < deadline:
            time.sleep(max(0.0, min(next_sample, deadline) - time.monotonic()))
            if time.monotonic() >= next_sample:
                samples.append((time.monotonic() - start, tree_rss(server.pid)))
                print(
                    f"{samples[-1][0]:6.0f} s  RSS {samples[-1][1] / MIB:8.1f} MiB  done {tally.completed}", flush=True
                )
                next_sample += args.sample_every
        for client in clients:
            client.join(timeout=150.0)
        samples.append((time.monotonic() - start, tree_rss(server.pid)))
    rss = [b for _, b in samples]
    spread = (max(rss) - min(rss)) / MIB if rss else 0.0
    payload = {
        "benchmark": "soak",
        "model": str(args.model.resolve()),
        "clients": args.clients,
        "minutes": args.minutes,
        "max_tokens": args.max_tokens,
        "parallel": args.parallel,
        "completed": tally.completed,
        "failed": tally.failed,
        "tokens": tally.tokens,
        "errors": tally.errors,
        "rss_samples": [{"at_s": round(t, 1), "rss_mib": round(b / MIB, 1)} for t, b in samples],
        "rss_spread_mib": round(spread, 1),
    }
    out: Path = args.out or RESULTS_DIR / f"soak-{args.model.stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    print("\n| minute | RSS (MiB) |\n|---|---|")
    for t, b in samples:
        print(f"| {t / 60:.1f} | {b / MIB:.1f} |")
    print(
        f"\n{args.clients} clients, {args.minutes:g} min: {tally.completed} requests completed, {tally.failed} failed, "
        f"{tally.tokens} tokens; RSS spread {spread:.1f} MiB (max - min over the samples)"
    )
    for error in tally.errors:
        print(f"error: {error}")
    return 0 if tally.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
