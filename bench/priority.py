"""FIM as you type while chat keeps every slot busy: /infill latency with and without priority.

One `localinfer serve` (4 slots) runs `--chat-clients` threads that stream greedy chat completions back to back,
so every slot is taken and chat requests queue for the next free one. Meanwhile a typist sends `--keystrokes`
/infill requests, one after another, alternating `"priority": "high"` (localinfer's default for /infill) and
`"priority": "normal"` (first come, first served with the queued chat: what every other server does). Reported:
the median and p95 latency of each, their ratio, and how many chat requests completed meanwhile (the chat is not
starved: it loses only the slots the keystrokes take).

Usage: .venv/bin/python bench/priority.py --model PATH_TO_FIM.gguf [--threads 2] [--chat-clients 8]
       [--keystrokes 20] [--chat-tokens 96] [--chat-notes 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    RESULTS_DIR,
    ManagedServer,
    free_port,
    install_sigterm_handler,
    machine_info,
    percentile,
    write_json,
)

PREFIX = "import math\n\n\ndef norm(values):\n    "
SUFFIX = "\n\n\ndef main():\n    print(norm([3, 4]))\n"


def chat_client(url: str, tokens: int, stop: threading.Event, done: list[int], number: int, notes: int) -> None:
    """Greedy chat completions back to back; each prompt starts with a new line, so none reuses a cached prompt."""
    keeper = "The keeper climbed the stairs, lit the lamp and wrote it down. " * notes
    with httpx.Client(timeout=600.0) as client:
        while not stop.is_set():
            ask = f"Request {number}.{len(done)}: {keeper}Tell story number {number} about a lighthouse keeper."
            body = {
                "messages": [{"role": "user", "content": ask}],
                "max_tokens": tokens,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
            }
            with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                response.raise_for_status()
                for _ in response.iter_lines():
                    pass
            done.append(1)


def keystroke(client: httpx.Client, url: str, typed: str, priority: str) -> float:
    body = {"input_prefix": PREFIX + typed, "input_suffix": SUFFIX, "n_predict": 8, "temperature": 0}
    started = time.perf_counter()
    response = client.post(f"{url}/infill", json={**body, "priority": priority})
    response.raise_for_status()
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a GGUF with FIM tokens")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chat-clients", type=int, default=8)
    parser.add_argument("--keystrokes", type=int, default=20)
    parser.add_argument("--chat-tokens", type=int, default=96)
    parser.add_argument(
        "--chat-notes",
        type=int,
        default=0,
        help="lengthen each chat prompt by this many 14-token sentences (long prompts: slots are often computing "
        "a prompt, which a high-priority keystroke may take over)",
    )
    args = parser.parse_args()
    install_sigterm_handler()
    port = free_port()
    command = [sys.executable, "-m", "localinfer.app.cli", "serve", str(args.model), "--port", str(port)]
    ctx = 1024 + 16 * args.chat_notes
    command += ["--ctx-size", str(4 * ctx), "--parallel", "4", "--threads", str(args.threads)]  # ctx a slot
    latencies: dict[str, list[float]] = {"high": [], "normal": []}
    completed: list[int] = []
    stop = threading.Event()
    with ManagedServer("localinfer", command, port, RESULTS_DIR / "logs" / "priority.log") as server:
        url = server.base_url
        with httpx.Client(timeout=600.0) as client:
            keystroke(client, url, "", "high")  # warm-up
            chats = [
                threading.Thread(
                    target=chat_client,
                    args=(url, args.chat_tokens, stop, completed, n, args.chat_notes),
                    daemon=True,
                )
                for n in range(args.chat_clients)
            ]
            for thread in chats:
                thread.start()
            time.sleep(3)  # every slot busy, chat queued behind them
            typed = "return math.sqrt(sum(v * v for v in values))"
            for n in range(args.keystrokes):
                priority = "high" if n % 2 == 0 else "normal"
                latencies[priority].append(keystroke(client, url, typed[: n + 1], priority))
                print(f"keystroke {n + 1} ({priority}): {latencies[priority][-1]:.0f} ms", file=sys.stderr)
            stop.set()
            for thread in chats:
                thread.join(timeout=600)
    summary: dict[str, Any] = {
        p: {"median_ms": statistics.median(v), "p95_ms": percentile(v, 95), "n": len(v)} for p, v in latencies.items()
    }
    ratio = summary["high"]["median_ms"] / summary["normal"]["median_ms"]
    print("| /infill priority | median ms | p95 ms | keystrokes |")
    print("|---|---:|---:|---:|")
    for priority, s in summary.items():
        print(f"| {priority} | {s['median_ms']:.0f} | {s['p95_ms']:.0f} | {s['n']} |")
    print(f"high / normal median: {ratio:.2f}; chat requests completed meanwhile: {len(completed)}")
    write_json(
        RESULTS_DIR / "priority.json",
        {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, "summary": summary},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
