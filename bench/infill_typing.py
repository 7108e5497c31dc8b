"""Editor FIM as you type: a typing session replayed against `localinfer serve` and llama-server in the same run.

Each session opens a ~1,500-token Python file (a fresh first line per session, so nothing is cached from the last
one) and types one line into the middle of it, one character per request, as llama.vscode does: 30 successive
`/infill` requests whose prefix grows by one character. The bodies are llama.vscode's (`createRequestPayload` in
ggml-org/llama.vscode src/llama-server.ts) with two changes that make the engines' work equal: greedy decoding
(`temperature` 0 and no `samplers` list) and `n_predict` fixed by `--predict`, with llama.vscode's time limits
left out. Four engines run one slot and `--threads` each: localinfer as it ships (KV cache reuse by shifting,
runs of 256 tokens and more, after inserted tokens too) and with `--cache-reuse 0`; llama-server without
`--cache-reuse` and with `--cache-reuse 256` (its best for editors). llama-server runs with `-fa on`, as
llama.cpp contexts made through llama-cpp-python do by default here (so all compute the same way). Sessions
alternate round by round.

Reported per engine: the latency of the first request of a session (the whole file computed) and of the
keystrokes after it (median and p95 over every round), tokens taken from the cache on the keystrokes, the ratios
of localinfer to each other engine, and how often a reply differs from the same engine computing the prompt whole
(a moved run of the cache attended to the old text before it): per request and per session.

Usage: .venv/bin/python bench/infill_typing.py --model PATH_TO_FIM.gguf [--threads 2] [--rounds 3]
       [--keystrokes 30] [--predict 16]
"""

from __future__ import annotations

import argparse
import contextlib
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
    percentile,
    write_json,
)

CTX = 4096
TYPED = "    return math.sqrt(sum(v * v for v in values)) / len(values)"


def source_file(session: int) -> tuple[str, str]:
    """A Python file of about 1,500 tokens split where the typed line goes: (text before, text after)."""
    functions = [
        f"def helper_{i}(values, scale={i}):\n"
        f'    """Scale the values by {i} and keep those above the mean."""\n'
        f"    mean = sum(values) / len(values)\n"
        f"    return [v * scale for v in values if v > mean]\n"
        for i in range(30)
    ]
    before = f"# session {session}\nimport math\n\n\n" + "\n\n".join(functions[:24]) + "\n\ndef norm(values):\n"
    after = "\n\n\n" + "\n\n".join(functions[24:]) + "\n"
    return before, after


def body(prefix: str, suffix: str, typed: str, predict: int) -> dict[str, Any]:
    return {
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": [],
        "prompt": typed,
        "n_predict": predict,
        "temperature": 0,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "cache_prompt": True,
    }


def session(client: httpx.Client, url: str, number: int, keystrokes: int, predict: int) -> list[dict[str, Any]]:
    prefix, suffix = source_file(number)
    requests = []
    for typed_chars in range(len(TYPED) - keystrokes + 1, len(TYPED) + 1):
        started = time.perf_counter()
        reply = client.post(f"{url}/infill", json=body(prefix, suffix, TYPED[:typed_chars], predict))
        elapsed = time.perf_counter() - started
        reply.raise_for_status()
        answer = reply.json()
        requests.append(
            {
                "ms": elapsed * 1000.0,
                "cached": answer["timings"].get("cache_n", answer.get("tokens_cached")),
                "evaluated": answer["tokens_evaluated"],
                "predicted": answer["tokens_predicted"],
                "content": answer["content"],
            }
        )
    return requests


def summary(sessions: list[list[dict[str, Any]]]) -> dict[str, Any]:
    firsts = [s[0]["ms"] for s in sessions]
    keys = [r["ms"] for s in sessions for r in s[1:]]
    return {
        "first_ms_median": statistics.median(firsts),
        "keystroke_ms_median": statistics.median(keys),
        "keystroke_ms_p95": percentile(keys, 95),
        "keystroke_ms_rounds": [statistics.median(r["ms"] for r in s[1:]) for s in sessions],
        "cached_on_keystrokes_min": min(r["cached"] for s in sessions for r in s[1:]),
        "evaluated_median": statistics.median(r["evaluated"] for s in sessions for r in s),
        "predicted_total": sum(r["predicted"] for s in sessions for r in s),
    }


def engines_to_run(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each engine's command line, without its port: localinfer as it ships (cache reuse by shifting, 256) and
    without it, llama-server without --cache-reuse and with it (256, its best)."""
    ours = [sys.executable, "-m", "localinfer.app.cli", "serve", str(args.model)]
    ours += ["--ctx-size", str(CTX), "--parallel", "1", "--threads", str(args.threads)]
    theirs = [str(llama_cpp_bin(args.llama_cpp_bin) / "llama-server"), "-m", str(args.model)]
    theirs += ["--host", HOST, "-c", str(CTX), "-np", "1", "-t", str(args.threads), "-fa", "on"]
    return {
        "localinfer": ours,
        "localinfer --cache-reuse 0": [*ours, "--cache-reuse", "0"],
        "llama-server": theirs,
        "llama-server --cache-reuse 256": [*theirs, "--cache-reuse", "256"],
    }


def differing(a: list[list[dict[str, Any]]], b: list[list[dict[str, Any]]]) -> dict[str, float]:
    """How often the replies of two engines' same sessions differ: per request, and per session (any request)."""
    pairs = [(x["content"] != y["content"]) for sa, sb in zip(a, b, strict=True) for x, y in zip(sa, sb, strict=True)]
    sessions = [
        any(x["content"] != y["content"] for x, y in zip(sa, sb, strict=True)) for sa, sb in zip(a, b, strict=True)
    ]
    return {"requests": sum(pairs) / len(pairs), "sessions": sum(sessions) / len(sessions)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a GGUF with FIM tokens")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keystrokes", type=int, default=30)
    parser.add_argument("--predict", type=int, default=16)
    parser.add_argument("--llama-cpp-bin", type=Path, default=None)
    args = parser.parse_args()
    install_sigterm_handler()
    logs = RESULTS_DIR / "logs"
    commands = engines_to_run(args)
    results: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in commands}
    with contextlib.ExitStack() as stack:
        engines: dict[str, str] = {}
        for i, (name, cmd) in enumerate(commands.items()):
            port = free_port()
            log = logs / f"infill-{i}.log"
            engines[name] = stack.enter_context(ManagedServer(name, [*cmd, "--port", str(port)], port, log)).base_url
        client = stack.enter_context(httpx.Client(timeout=600.0))
        for url in engines.values():  # warm-up: load, first allocations
            session(client, url, -1, 2, args.predict)
        for number in range(args.rounds):
            order = list(engines) if number % 2 == 0 else list(reversed(engines))
            for name in order:
                results[name].append(session(client, engines[name], number, args.keystrokes, args.predict))
            print(f"round {number + 1} done", file=sys.stderr)
    summaries = {name: summary(sessions) for name, sessions in results.items()}
    ours = summaries["localinfer"]
    ratios = {
        f"localinfer / {name}": {
            "keystroke_median": ours["keystroke_ms_median"] / s["keystroke_ms_median"],
            "keystroke_p95": ours["keystroke_ms_p95"] / s["keystroke_ms_p95"],
            "keystroke_rounds": [
                a / b for a, b in zip(ours["keystroke_ms_rounds"], s["keystroke_ms_rounds"], strict=True)
            ],
        }
        for name, s in summaries.items()
        if name != "localinfer"
    }
    differs = {
        "localinfer vs localinfer --cache-reuse 0": differing(
            results["localinfer"], results["localinfer --cache-reuse 0"]
        ),
        "llama-server --cache-reuse 256 vs llama-server": differing(
            results["llama-server --cache-reuse 256"], results["llama-server"]
        ),
    }
    print("| engine | first request ms (median) | keystroke ms median | keystroke ms p95 | cached tokens (min) |")
    print("|---|---:|---:|---:|---:|")
    for name, s in summaries.items():
        print(
            f"| {name} | {s['first_ms_median']:.0f} | {s['keystroke_ms_median']:.1f} | {s['keystroke_ms_p95']:.1f} "
            f"| {s['cached_on_keystrokes_min']} of ~{s['evaluated_median']:.0f} |"
        )
    for name, r in ratios.items():
        rounds = ", ".join(f"{x:.2f}" for x in r["keystroke_rounds"])
        print(f"{name}: keystroke median {r['keystroke_median']:.2f} (rounds {rounds}), p95 {r['keystroke_p95']:.2f}")
    for name, d in differs.items():
        print(f"replies that differ, {name}: {d['requests']:.1%} of requests, {d['sessions']:.1%} of sessions")
    write_json(
        RESULTS_DIR / "infill-typing.json",
        {
            "machine": machine_info(),
            "args": {k: str(v) for k, v in vars(args).items()},
            "summaries": summaries,
            "ratios": ratios,
            "differing": differs,
            "sessions": results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
