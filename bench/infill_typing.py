"""Editor FIM as you type: a typing session replayed against `localinfer serve` and llama-server in the same run.

Each session opens a ~1,500-token Python file (a fresh first line per session, so nothing is cached from the last
one) and types one line into the middle of it, one character per request, as llama.vscode does: 30 successive
`/infill` requests whose prefix grows by one character. The bodies are llama.vscode's (`createRequestPayload` in
ggml-org/llama.vscode src/llama-server.ts) with two changes that make the engines' work equal: greedy decoding
(`temperature` 0 and no `samplers` list) and `n_predict` fixed by `--predict`, with llama.vscode's time limits
left out. Both engines run one slot and `--threads`; llama-server runs with `-fa on`, as llama.cpp contexts made
through llama-cpp-python do by default here (so both compute the same way). Sessions alternate between the engines
round by round.

Reported per engine: the latency of the first request of a session (the whole file computed) and of the
keystrokes after it (median and p95 over every round), tokens taken from the cache on the keystrokes, and the
ratios localinfer / llama-server.

Usage: .venv/bin/python bench/infill_typing.py --model PATH_TO_FIM.gguf [--threads 2] [--rounds 3]
       [--keystrokes 30] [--predict 16]
"""

from __future__ import annotations

import argparse
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
    ours_port, theirs_port = free_port(), free_port()
    ours_cmd = [sys.executable, "-m", "localinfer.app.cli", "serve", str(args.model), "--port", str(ours_port)]
    ours_cmd += ["--ctx-size", str(CTX), "--parallel", "1", "--threads", str(args.threads)]
    theirs_cmd = [str(llama_cpp_bin(args.llama_cpp_bin) / "llama-server"), "-m", str(args.model)]
    theirs_cmd += ["--host", HOST, "--port", str(theirs_port), "-c", str(CTX), "-np", "1", "-t", str(args.threads)]
    theirs_cmd += ["-fa", "on"]
    results: dict[str, list[list[dict[str, Any]]]] = {"localinfer": [], "llama-server": []}
    with (
        ManagedServer("localinfer", ours_cmd, ours_port, logs / "infill-localinfer.log") as ours,
        ManagedServer("llama-server", theirs_cmd, theirs_port, logs / "infill-llama-server.log") as theirs,
        httpx.Client(timeout=300.0) as client,
    ):
        engines = {"localinfer": ours.base_url, "llama-server": theirs.base_url}
        for url in engines.values():  # warm-up: load, first allocations
            session(client, url, -1, 2, args.predict)
        for number in range(args.rounds):
            order = list(engines) if number % 2 == 0 else list(reversed(engines))
            for name in order:
                results[name].append(session(client, engines[name], number, args.keystrokes, args.predict))
                print(f"round {number + 1}: {name} done", file=sys.stderr)
    same_text = all(
        a["content"] == b["content"]
        for sa, sb in zip(results["localinfer"], results["llama-server"], strict=True)
        for a, b in zip(sa, sb, strict=True)
    )
    summaries = {name: summary(sessions) for name, sessions in results.items()}
    ours_s, theirs_s = summaries["localinfer"], summaries["llama-server"]
    ratios = {
        "keystroke_median": ours_s["keystroke_ms_median"] / theirs_s["keystroke_ms_median"],
        "keystroke_p95": ours_s["keystroke_ms_p95"] / theirs_s["keystroke_ms_p95"],
        "first": ours_s["first_ms_median"] / theirs_s["first_ms_median"],
        "keystroke_rounds": [
            a / b for a, b in zip(ours_s["keystroke_ms_rounds"], theirs_s["keystroke_ms_rounds"], strict=True)
        ],
    }
    print("| engine | first request ms (median) | keystroke ms median | keystroke ms p95 | cached tokens (min) |")
    print("|---|---:|---:|---:|---:|")
    for name, s in summaries.items():
        print(
            f"| {name} | {s['first_ms_median']:.0f} | {s['keystroke_ms_median']:.1f} | {s['keystroke_ms_p95']:.1f} "
            f"| {s['cached_on_keystrokes_min']} of ~{s['evaluated_median']:.0f} |"
        )
    print(
        f"localinfer / llama-server: keystroke median {ratios['keystroke_median']:.2f} "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios['keystroke_rounds'])}), p95 {ratios['keystroke_p95']:.2f}, "
        f"first request {ratios['first']:.2f}; same text on every request: {same_text}"
    )
    write_json(
        RESULTS_DIR / "infill-typing.json",
        {
            "machine": machine_info(),
            "args": {k: str(v) for k, v in vars(args).items()},
            "summaries": summaries,
            "ratios": ratios,
            "same_text": same_text,
            "sessions": results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
