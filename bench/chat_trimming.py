"""A long chat whose client trims the oldest turns to stay in the context, as Open WebUI and Continue do: time to
first token turn by turn, localinfer against llama-server with and without `--cache-reuse 256`, the same run.

Each conversation has a system prompt and `--turns` user turns of ~100 tokens each; the model's greedy reply (up to
`--reply` tokens) goes back into the history, as a client sends it. Once the history passes `--budget` characters,
the oldest turns are dropped (the system prompt stays), so from then on every prompt lost its start since the last
one: a cache that only reuses a common prefix computes almost all of it again, one that moves the rest back does
not. Per engine it reports the median time to first token of each turn over `--rounds` conversations (streamed,
on the client's clock), the prompt tokens computed, and turn `--turns` against turn 2 (the target: at most 1.5x).

Usage: .venv/bin/python bench/chat_trimming.py --model SMOLLM2.gguf [--rounds 3] [--turns 20] [--budget 3000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
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
    install_sigterm_handler,
    llama_cpp_bin,
    machine_info,
    write_json,
)

CTX = 4096
SYSTEM = "You are a patient tutor. Answer briefly and precisely, and ask a question back when it helps."
TOPICS = ["rivers", "volcanoes", "bridges", "orchestras", "glaciers", "libraries", "comets", "forests"]


def user_turn(conversation: int, turn: int) -> str:
    """About 100 tokens of question, different every turn and conversation."""
    topic = TOPICS[(conversation + turn) % len(TOPICS)]
    facts = " ".join(
        f"Point {i}: {topic} number {turn * 10 + i} is described in note {conversation}-{turn}-{i}." for i in range(6)
    )
    return f"Turn {turn} of conversation {conversation}. Tell me about {topic}. {facts} What matters most here?"


def trimmed(history: list[dict[str, str]], budget: int) -> list[dict[str, str]]:
    """The system prompt and the most recent turns that fit in ``budget`` characters (whole user-reply pairs)."""
    system, turns = history[0], history[1:]
    while len(turns) > 1 and sum(len(m["content"]) for m in turns) > budget:
        turns = turns[2:]
    return [system, *turns]


def one_turn(client: httpx.Client, url: str, messages: list[dict[str, str]], reply: int) -> dict[str, Any]:
    body = {"messages": messages, "max_tokens": reply, "temperature": 0, "stream": True, "cache_prompt": True}
    sent = time.perf_counter()
    first = None
    parts: list[str] = []
    timings: dict[str, Any] = {}
    # a connection per turn: llama-server closes a kept-alive one after a few requests, mid-conversation
    with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers={"Connection": "close"}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            timings = event.get("timings") or timings
            for choice in event.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    first = first if first is not None else time.perf_counter()
                    parts.append(text)
    return {
        "ttft_ms": ((first if first is not None else time.perf_counter()) - sent) * 1000.0,
        "prompt_n": timings.get("prompt_n"),
        "reply": "".join(parts),
    }


def conversation(client: httpx.Client, url: str, number: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    history = [{"role": "system", "content": SYSTEM}]
    turns = []
    for turn in range(1, args.turns + 1):
        history.append({"role": "user", "content": user_turn(number, turn)})
        history = trimmed(history, args.budget)
        result = one_turn(client, url, history, args.reply)
        history.append({"role": "assistant", "content": result["reply"]})
        turns.append(result)
    return turns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--reply", type=int, default=24)
    parser.add_argument("--budget", type=int, default=3000, help="characters of turns the client keeps")
    parser.add_argument("--llama-cpp-bin", type=Path, default=None)
    args = parser.parse_args()
    install_sigterm_handler()
    ours = [sys.executable, "-m", "localinfer.app.cli", "serve", str(args.model), "--ctx-size", str(CTX)]
    ours += ["--parallel", "1", "--threads", str(args.threads)]
    theirs = [str(llama_cpp_bin(args.llama_cpp_bin) / "llama-server"), "-m", str(args.model), "--host", HOST]
    theirs += ["-c", str(CTX), "-np", "1", "-t", str(args.threads), "-fa", "on", "--jinja"]
    commands = {
        "localinfer": ours,
        "llama-server": theirs,
        "llama-server --cache-reuse 256": [*theirs, "--cache-reuse", "256"],
    }
    results: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in commands}
    with contextlib.ExitStack() as stack:
        urls = {}
        for i, (name, cmd) in enumerate(commands.items()):
            port = free_port()
            log = RESULTS_DIR / "logs" / f"chat-trimming-{i}.log"
            urls[name] = stack.enter_context(ManagedServer(name, [*cmd, "--port", str(port)], port, log)).base_url
        client = stack.enter_context(httpx.Client(timeout=600.0))
        for number in range(args.rounds):
            for name in list(urls) if number % 2 == 0 else list(reversed(urls)):
                results[name].append(conversation(client, urls[name], number, args))
            print(f"conversation {number + 1} done", file=sys.stderr)
    report: dict[str, Any] = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}}
    print("| engine | turn 2 ttft ms | last turn ttft ms | last / turn 2 | prompt tokens computed, last turn |")
    print("|---|---:|---:|---:|---:|")
    for name, runs in results.items():
        per_turn = [statistics.median(run[t]["ttft_ms"] for run in runs) for t in range(args.turns)]
        ratios = [run[-1]["ttft_ms"] / run[1]["ttft_ms"] for run in runs]
        computed = statistics.median(run[-1]["prompt_n"] or 0 for run in runs)
        report[name] = {"ttft_ms_per_turn": per_turn, "last_over_turn2": ratios, "last_prompt_n": computed}
        spread = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        print(f"| {name} | {per_turn[1]:.0f} | {per_turn[-1]:.0f} | {spread} | {computed:.0f} |")
    write_json(RESULTS_DIR / "chat-trimming.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
