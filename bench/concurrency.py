"""Concurrent streams and multi-turn chat: `localinfer serve` vs llama.cpp's llama-server vs llama-cpp-python's server.

All three run on the same GGUF file with the same thread count, in one invocation:

1. Throughput: at each level L of `--levels`, L clients stream `/v1/completions` at the same time (each with a
   prompt that starts with its own words, so no prefix is shared; `temperature 0`, `ignore_eos`,
   `max_tokens M`), one warm-up round and `--rounds` measured ones. Servers are restarted per level with
   L slots (or `--parallel`). Reported: aggregate generated tok/s (tokens of a round / wall time of the
   round), TTFT and end-to-end latency p50/p95, and the peak RSS of the server's process tree.
2. Multi-turn chat: one client, 10 streamed `/v1/chat/completions` turns; each adds ~120 tokens of user text
   and the 24-token reply, so the history grows to ~1,500 tokens. Reported: TTFT per turn, turn 10 / turn 1.
   With `--system-words N`, every conversation starts with the same system prompt of N words, and the warm-up
   conversation before turn 1 (another conversation) has it too: turn 1 finds it cached.

Usage: .venv/bin/python bench/concurrency.py --model PATH [--threads 2] [--levels 1,4,8]
       [--engines localinfer,llama-server,llama-cpp-python]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    HOST,
    RESULTS_DIR,
    BenchError,
    ManagedServer,
    RssSampler,
    StreamStats,
    free_port,
    greedy_body,
    install_sigterm_handler,
    llama_cpp_bin,
    percentile,
    stream_chat_completion,
    stream_concurrently,
)
from concurrency_report import write_outputs

ENGINES = ("localinfer", "llama-server", "llama-cpp-python")
MIB = 1024 * 1024
EOG_BIAS = -1000.0  # logit bias that keeps llama-cpp-python off end-of-generation tokens (temperature 0)


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Every request starts with its own word (then a random tag), so no two requests share a cached prefix.
FIRST_WORDS = _words(
    "Amber Basalt Cobalt Dune Ember Fjord Granite Harbor Indigo Juniper Kelp Lantern Meadow Nickel Orchid Pebble "
    "Quartz Rowan Saffron Tundra Umber Violet Willow Xenon Yarrow Zephyr Acorn Birch Cedar Delta Elm Fern Garnet "
    "Hazel Iris Jade Kestrel Lichen Maple Nectar Onyx Pine Quill Reed Sage Thistle"
)
TOPICS = (
    "Write a long, detailed essay about how computers became smaller, faster and cheaper, decade by decade.",
    "Describe, step by step and at length, how a river shapes the valley it flows through over a million years.",
    "Explain in great detail how a modern city plans, builds and maintains its network of water pipes.",
    "Tell a long story about a lighthouse keeper who finds a strange map washed up on the shore one winter.",
    "Give a thorough history of the bicycle, from the first wooden designs to today's carbon frames.",
    "Explain carefully how bread is made, from growing wheat to milling flour, kneading, proofing and baking.",
    "Write a detailed travel guide to an imaginary island, covering its towns, food, weather and festivals.",
    "Describe at length how bees organise their hive, find flowers and communicate with one another.",
)
# Words for the multi-turn user messages: deterministic filler text of about 120 tokens per turn.
CHAT_WORDS = _words(
    "the a river city night morning bright quiet window garden letter friend road mountain old new small large "
    "walked found opened remembered wrote carried watched listened because while after before under over near "
    "every little story music kitchen market winter summer bridge train station coffee paper lamp forest stone "
    "careful slowly gently suddenly together alone people children teacher doctor farmer sailor painter map"
)
CHAT_TURNS = 10
CHAT_WORDS_PER_TURN = 95


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="GGUF file to load in every engine")
    ap.add_argument("--threads", type=int, default=2, help="compute threads for every engine (default 2)")
    ap.add_argument("--levels", default="1,4,8", help="concurrent streams to measure (default 1,4,8)")
    ap.add_argument("--parallel", type=int, help="fixed slot count for localinfer/llama-server (default: the level)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per streamed request (default 128)")
    ap.add_argument("--rounds", type=int, default=2, help="measured rounds per level, after one warm-up (default 2)")
    ap.add_argument("--ctx", type=int, default=4096, help="context tokens per request (default 4096)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {','.join(ENGINES)}")
    ap.add_argument("--skip-multiturn", action="store_true", help="only the throughput scenario")
    ap.add_argument(
        "--alternate", action="store_true", help="all servers of a level up at once, engines taking turns each round"
    )
    ap.add_argument("--chat-max-tokens", type=int, default=24, help="reply tokens per chat turn (default 24)")
    ap.add_argument(
        "--system-words", type=int, default=0, help="a system prompt of this many words shared by every chat"
    )
    ap.add_argument("--llama-bin", type=Path, help="folder with llama-server (default: bench/build-llama-cpp)")
    ap.add_argument(
        "--localinfer",
        type=Path,
        default=Path(sys.executable).parent / "localinfer",
        help="localinfer executable (default: the one next to this Python)",
    )
    ap.add_argument(
        "--python",
        type=Path,
        default=Path(sys.executable),
        help="Python that runs `-m llama_cpp.server` (default: this one)",
    )
    ap.add_argument("--server-arg", action="append", default=[], help="extra llama-server argument (repeat)")
    ap.add_argument("--localinfer-arg", action="append", default=[], help="extra `localinfer serve` argument")
    ap.add_argument("--llama-cpp-python-arg", action="append", default=[], help="extra llama_cpp.server argument")
    ap.add_argument("--startup-timeout", type=float, default=180.0, help="seconds to wait for a server to be ready")
    ap.add_argument("--request-timeout", type=float, default=600.0, help="seconds one streamed request may take")
    ap.add_argument("--label", help="model name for the tables and the plot (default: the file name)")
    ap.add_argument(
        "--out",
        type=Path,
        help="JSON output, the plot next to it (default: bench/results/concurrency-<model stem>.json)",
    )
    args = ap.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(args.engines) - set(ENGINES)
    if unknown:
        ap.error(f"unknown engine(s): {', '.join(sorted(unknown))}")
    try:
        args.levels = sorted({int(x) for x in args.levels.split(",") if x.strip()})
    except ValueError:
        ap.error(f"--levels must be comma-separated integers, got {args.levels!r}")
    if not args.levels or min(args.levels) < 1:
        ap.error("--levels needs at least one level, all >= 1")
    if not args.model.is_file():
        ap.error(f"no such model file: {args.model}")
    if args.rounds < 1 or args.max_tokens < 2 or args.chat_max_tokens < 1:
        ap.error("--rounds must be >= 1, --max-tokens >= 2, --chat-max-tokens >= 1")
    if args.parallel is not None and args.parallel < 1:
        ap.error("--parallel must be >= 1")
    return args


@dataclass(frozen=True)
class EngineSetup:
    """How to start one engine and what it needs in every request body."""

    name: str
    bin_dir: Path | None
    lcp_flags: frozenset[str] = frozenset()  # the flags `python -m llama_cpp.server --help` lists
    eog_ids: tuple[int, ...] = ()  # the model's end-of-generation tokens, for llama-cpp-python

    def command(self, port: int, slots: int, args: argparse.Namespace) -> list[str]:
        threads, ctx = str(args.threads), args.ctx
        if self.name == "localinfer":
            return [
                str(args.localinfer), "serve", str(args.model),
                "--host", HOST, "--port", str(port),
                "--threads", threads,
                "--parallel", str(slots),
                "--ctx-size", str(ctx * slots),  # with --parallel, split across the slots as llama-server: C each
                *args.localinfer_arg,
            ]  # fmt: skip
        if self.name == "llama-server":
            assert self.bin_dir is not None
            return [
                str(self.bin_dir / "llama-server"),
                "-m", str(args.model),
                "--host", HOST, "--port", str(port),
                "-t", threads,
                "-np", str(slots),
                "-c", str(ctx * slots),  # llama-server splits -c across its slots: C tokens each
                *args.server_arg,
            ]  # fmt: skip
        cmd = [
            str(args.python), "-m", "llama_cpp.server",
            "--model", str(args.model),
            "--host", HOST, "--port", str(port),
            "--n_threads", threads,
            "--n_ctx", str(ctx),
        ]  # fmt: skip
        # Its defaults differ from the other engines': prompt threads = all CPUs, mlock on, logits for every
        # prompt token (logits_all: the output layer runs over the whole prompt and the logits are copied to
        # Python), and a new request cuts off the one streaming (interrupt_requests). Pin them where this
        # version has the flag; an --llama-cpp-python-arg overrides a pin (argparse: the last one wins).
        pins = (
            ("--n_threads_batch", threads),
            ("--use_mlock", "False"),
            ("--logits_all", "False"),
            ("--interrupt_requests", "False"),
        )
        for flag, value in pins:
            if flag in self.lcp_flags:
                cmd += [flag, value]
        return [*cmd, *args.llama_cpp_python_arg]

    @property
    def health_path(self) -> str:
        return "/v1/models" if self.name == "llama-cpp-python" else "/health"

    def slots(self, level: int, args: argparse.Namespace) -> int:
        if self.name == "llama-cpp-python":
            return 1  # one Llama object, one request at a time
        return args.parallel or level

    def body_extra(self) -> dict[str, Any]:
        """What stands in for `ignore_eos` where the engine lacks it.

        llama-cpp-python has no `ignore_eos`, and its `min_tokens` only bans the one EOS token while it stops at
        any end-of-generation token (Gemma 3 answers its llama-2 fallback chat format with `</s>`, an EOG token
        that is not EOS). So it gets what llama-server's `ignore_eos` does: a large negative `logit_bias` on every
        EOG token of the model. Not together with `min_tokens`: with both, llama-cpp-python 0.3.x drops both
        (`logits_processor = logits_processor.extend(...)` in `Llama._create_completion` sets it to None).
        """
        if self.name != "llama-cpp-python":
            return {}
        return {"logit_bias": {str(t): EOG_BIAS for t in self.eog_ids}}


def llama_cpp_python_flags(python: Path) -> frozenset[str]:
    proc = subprocess.run(
        [str(python), "-m", "llama_cpp.server", "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise BenchError(f"`{python} -m llama_cpp.server --help` failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return frozenset(word.rstrip(",") for word in proc.stdout.split() if word.startswith("--"))


def llama_cpp_python_eog_ids(python: Path, model: Path) -> tuple[int, ...]:
    """The model's end-of-generation token ids, read by llama-cpp-python from the vocabulary alone."""
    code = (
        "import json, sys, llama_cpp\n"
        "m = llama_cpp.Llama(sys.argv[1], vocab_only=True, verbose=False)\n"
        "v = llama_cpp.llama_model_get_vocab(m.model)\n"
        "print(json.dumps([t for t in range(m.n_vocab()) if llama_cpp.llama_vocab_is_eog(v, t)]))\n"
    )
    proc = subprocess.run(
        [str(python), "-c", code, str(model)], capture_output=True, text=True, timeout=300, check=False
    )
    if proc.returncode != 0:
        raise BenchError(f"reading the EOG tokens with llama-cpp-python failed: {proc.stderr[-1500:]}")
    lines = proc.stdout.strip().splitlines()
    ids = json.loads(lines[-1]) if lines else []
    if not ids:
        raise BenchError("llama-cpp-python found no end-of-generation token in the model")
    return tuple(int(t) for t in ids)


def start_server(setup: EngineSetup, slots: int, label: str, args: argparse.Namespace) -> ManagedServer:
    port = free_port()
    cmd = setup.command(port, slots, args)
    log_path = RESULTS_DIR / "logs" / f"concurrency-{setup.name}-{args.model.stem}-{label}.log"
    print(f"[{setup.name}] {' '.join(cmd)}", file=sys.stderr)
    return ManagedServer(setup.name, cmd, port, log_path, args.startup_timeout, setup.health_path)


def request_body(model_id: str, prompt: str, setup: EngineSetup, args: argparse.Namespace) -> dict[str, Any]:
    return greedy_body(model_id, args.max_tokens, prompt=prompt, **setup.body_extra())


def one_round(
    setup: EngineSetup, server: ManagedServer, level: int, counter: int, args: argparse.Namespace
) -> tuple[float, list[StreamStats]]:
    """``level`` clients streaming at once, each prompt starting with its own words (the ``counter``-th on)."""
    model_id = server.model_id(args.model.stem)
    bodies = []
    for client in range(level):
        word = FIRST_WORDS[(counter + client) % len(FIRST_WORDS)]
        prompt = f"{word} {secrets.token_hex(3)}. {TOPICS[client % len(TOPICS)]}"
        bodies.append(request_body(model_id, prompt, setup, args))
    return stream_concurrently(server.base_url, bodies, args.request_timeout)


def round_record(wall: float, stats: list[StreamStats]) -> dict[str, Any]:
    tokens = sum(s.tokens for s in stats)
    return {
        "wall_s": wall,
        "tokens": tokens,
        "tok_s": tokens / wall,
        "requests": [
            {
                "ttft_ms": s.ttft_s * 1000,
                "e2e_ms": s.total_s * 1000,
                "tokens": s.tokens,
                "usage_tokens": s.usage_tokens,
                "text_chunks": s.text_chunks,
                "decode_tps": s.decode_tps,
                "finish_reason": s.finish_reason,
            }
            for s in stats
        ],
    }


def level_summary(
    server: ManagedServer,
    level: int,
    slots: int,
    rounds: list[dict[str, Any]],
    all_stats: list[StreamStats],
    rss: RssSampler,
    rss_idle: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    ttft = [s.ttft_s * 1000 for s in all_stats]
    e2e = [s.total_s * 1000 for s in all_stats]
    short = sorted({s.tokens for s in all_stats if s.tokens < args.max_tokens})
    total_tokens = sum(r["tokens"] for r in rounds)
    total_wall = sum(r["wall_s"] for r in rounds)
    return {
        "command": server.cmd,
        "model_id": server.model_id(args.model.stem),
        "streams": level,
        "slots": slots,
        "agg_tok_s": total_tokens / total_wall,
        "ttft_ms_p50": percentile(ttft, 50),
        "ttft_ms_p95": percentile(ttft, 95),
        "e2e_ms_p50": percentile(e2e, 50),
        "e2e_ms_p95": percentile(e2e, 95),
        "stream_decode_tps_median": statistics.median(s.decode_tps for s in all_stats),
        "rss_idle_mib": rss_idle / MIB,
        "rss_peak_mib": rss.peak_bytes / MIB,
        "rss_samples": rss.samples,
        "warning": f"requests with fewer than max_tokens tokens: {short}" if short else None,
        "rounds": rounds,
        "log": str(server.log_path),
    }


def run_throughput(setup: EngineSetup, level: int, args: argparse.Namespace) -> dict[str, Any]:
    slots = setup.slots(level, args)
    server = start_server(setup, slots, f"L{level}", args)
    rounds: list[dict[str, Any]] = []
    all_stats: list[StreamStats] = []
    with server, RssSampler(server.pid) as rss:
        rss_idle = rss.sample()
        for r in range(1 + args.rounds):
            wall, stats = one_round(setup, server, level, r * level, args)
            if r == 0:
                continue  # warm-up
            rounds.append(round_record(wall, stats))
            all_stats += stats
            print(
                f"[{setup.name}] L={level} round {r}: {rounds[-1]['tok_s']:.1f} tok/s aggregate, "
                f"{rounds[-1]['tokens']} tokens in {wall:.2f} s, TTFT max {max(s.ttft_s for s in stats) * 1000:.0f} ms",
                file=sys.stderr,
            )
        return level_summary(server, level, slots, rounds, all_stats, rss, rss_idle, args)


def run_alternating(setups: dict[str, EngineSetup], level: int, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every engine's server up at once; each round, the engines take turns in an order that rotates, so a
    slower moment of the machine falls on each alike. Each result also has ``round_tok_s``, the engine's
    aggregate tok/s round by round, for ratios within a round."""
    names = list(setups)
    slots = {name: setups[name].slots(level, args) for name in names}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    stats_of: dict[str, list[StreamStats]] = {name: [] for name in names}
    with ExitStack() as stack:
        servers = {
            name: stack.enter_context(start_server(setups[name], slots[name], f"L{level}", args)) for name in names
        }
        samplers = {name: stack.enter_context(RssSampler(servers[name].pid)) for name in names}
        idle = {name: samplers[name].sample() for name in names}
        for r in range(1 + args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                wall, stats = one_round(setups[name], servers[name], level, r * level, args)
                if r == 0:
                    continue  # warm-up
                rounds[name].append(round_record(wall, stats))
                stats_of[name] += stats
                print(f"[{name}] L={level} round {r}: {rounds[name][-1]['tok_s']:.1f} tok/s", file=sys.stderr)
        results = {}
        for name in names:
            summary = level_summary(
                servers[name], level, slots[name], rounds[name], stats_of[name], samplers[name], idle[name], args
            )
            results[name] = {**summary, "round_tok_s": [rec["tok_s"] for rec in rounds[name]]}
        return results


def chat_user_text(turn: int) -> str:
    rng = random.Random(7919 * turn)
    words = [rng.choice(CHAT_WORDS) for _ in range(CHAT_WORDS_PER_TURN)]
    return f"Note {turn}: " + " ".join(words) + ". Reply with one short sentence about this note."


def system_prompt(n_words: int) -> list[dict[str, str]]:
    """The shared system message of ``n_words`` words (none for 0)."""
    if n_words <= 0:
        return []
    rng = random.Random(104729)
    words = " ".join(rng.choice(CHAT_WORDS) for _ in range(n_words))
    return [{"role": "system", "content": f"You are the assistant of a team whose notes follow. {words}."}]


def run_multiturn(setup: EngineSetup, args: argparse.Namespace) -> dict[str, Any]:
    slots = setup.slots(1, args)
    server = start_server(setup, slots, "chat", args)
    turns: list[dict[str, Any]] = []
    with server, httpx.Client() as client:
        model_id = server.model_id(args.model.stem)
        base = greedy_body(model_id, args.chat_max_tokens, **setup.body_extra())
        # Warm-up: one short unrelated chat, so turn 1 does not pay for first-request costs (and, with a system
        # prompt, another conversation has computed it before turn 1).
        system = system_prompt(args.system_words)
        warm = [*system, {"role": "user", "content": "Hello! Say hi."}]
        stream_chat_completion(client, server.base_url, {**base, "messages": warm}, args.request_timeout)
        history: list[dict[str, str]] = list(system)
        for turn in range(1, CHAT_TURNS + 1):
            history.append({"role": "user", "content": chat_user_text(turn)})
            stats = stream_chat_completion(client, server.base_url, {**base, "messages": history}, args.request_timeout)
            history.append({"role": "assistant", "content": stats.text})
            turns.append(
                {
                    "turn": turn,
                    "ttft_ms": stats.ttft_s * 1000,
                    "e2e_ms": stats.total_s * 1000,
                    "tokens": stats.tokens,
                    "prompt_tokens": stats.prompt_tokens,
                    "cached_tokens": stats.cached_tokens,
                    "reply": stats.text[:200],
                }
            )
            print(
                f"[{setup.name}] chat turn {turn}: TTFT {stats.ttft_s * 1000:.0f} ms, prompt {stats.prompt_tokens}"
                f" (cached {stats.cached_tokens}), {stats.tokens} tokens",
                file=sys.stderr,
            )
    first, last = turns[0]["ttft_ms"], turns[-1]["ttft_ms"]
    return {
        "command": server.cmd,
        "slots": slots,
        "turn1_ttft_ms": first,
        "turn10_ttft_ms": last,
        "ratio_10_1": last / first,
        "final_prompt_tokens": turns[-1]["prompt_tokens"],
        "history_chars": sum(len(m["content"]) for m in history),
        "turns": turns,
        "log": str(server.log_path),
    }


def print_round_ratios(throughput: dict[str, dict[str, dict[str, Any]]], levels: list[int]) -> None:
    """localinfer / llama-server aggregate tok/s computed within each round: the median and the min-max."""
    print("| streams | localinfer / llama-server, median | min-max | rounds |")
    print("|---|---|---|---|")
    for level in levels:
        ours = throughput.get("localinfer", {}).get(str(level), {}).get("round_tok_s")
        theirs = throughput.get("llama-server", {}).get(str(level), {}).get("round_tok_s")
        if not ours or not theirs:
            continue
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        print(f"| {level} | {statistics.median(ratios):.2f} | {min(ratios):.2f}-{max(ratios):.2f} | {len(ratios)} |")


FAILURES = (BenchError, httpx.HTTPError, subprocess.TimeoutExpired, json.JSONDecodeError)


def main(argv: list[str] | None = None) -> int:
    install_sigterm_handler()
    args = parse_args(argv)
    setups: dict[str, EngineSetup | dict[str, str]] = {}
    for engine in args.engines:
        try:
            if engine == "localinfer" and not os.access(args.localinfer, os.X_OK):
                raise BenchError(f"not installed ({args.localinfer})")
            bin_dir = llama_cpp_bin(args.llama_bin) if engine == "llama-server" else None
            if engine == "llama-cpp-python":
                flags = llama_cpp_python_flags(args.python)
                eog = llama_cpp_python_eog_ids(args.python, args.model)
                setups[engine] = EngineSetup(engine, None, flags, eog)
            else:
                setups[engine] = EngineSetup(engine, bin_dir)
        except FAILURES as exc:
            print(f"[{engine}] skipped: {exc}", file=sys.stderr)
            setups[engine] = {"skipped": str(exc)[-1500:]}

    load_before = os.getloadavg()  # other work on the machine skews every figure: keep a trace of it
    failed = any(not isinstance(s, EngineSetup) for s in setups.values())
    throughput: dict[str, dict[str, dict[str, Any]]] = {engine: {} for engine in args.engines}
    multiturn: dict[str, dict[str, Any]] = {}
    # Engines take turns within a level, so drift on a shared machine hits all of them alike (--alternate: round
    # by round, with every server up at once).
    for level in args.levels if args.alternate else ():
        ready = {engine: setup for engine, setup in setups.items() if isinstance(setup, EngineSetup)}
        try:
            for engine, result in run_alternating(ready, level, args).items():
                throughput[engine][str(level)] = result
        except FAILURES as exc:
            failed = True
            print(f"L={level} FAILED: {exc}", file=sys.stderr)
            for engine in ready:
                throughput[engine][str(level)] = {"error": f"failed: {type(exc).__name__}", "detail": str(exc)[-3000:]}
    for level in () if args.alternate else args.levels:
        for engine, setup in setups.items():
            if not isinstance(setup, EngineSetup):
                throughput[engine][str(level)] = dict(setup)
                continue
            try:
                throughput[engine][str(level)] = run_throughput(setup, level, args)
            except FAILURES as exc:
                failed = True
                print(f"[{engine}] L={level} FAILED: {exc}", file=sys.stderr)
                throughput[engine][str(level)] = {"error": f"failed: {type(exc).__name__}", "detail": str(exc)[-3000:]}
    if args.alternate:
        print_round_ratios(throughput, args.levels)
    if not args.skip_multiturn:
        for engine, setup in setups.items():
            if not isinstance(setup, EngineSetup):
                multiturn[engine] = dict(setup)
                continue
            try:
                multiturn[engine] = run_multiturn(setup, args)
            except FAILURES as exc:
                failed = True
                print(f"[{engine}] multi-turn FAILED: {exc}", file=sys.stderr)
                multiturn[engine] = {"error": f"failed: {type(exc).__name__}", "detail": str(exc)[-3000:]}

    bin_dirs = [s.bin_dir for s in setups.values() if isinstance(s, EngineSetup) and s.bin_dir]
    info_path = bin_dirs[0] / "BUILD-INFO" if bin_dirs else None
    write_outputs(
        args,
        throughput=throughput,
        multiturn=multiturn,
        llama_cpp_bin=bin_dirs[0] if bin_dirs else None,
        llama_cpp_build=info_path.read_text() if info_path and info_path.is_file() else None,
        load_before=load_before,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
