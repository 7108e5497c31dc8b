"""llama-server and localinfer on the same llama.cpp build, the same model file and the same flags (issue #42):
decode at 1, 16 and 64 concurrent streams, prefill of 2k- and 8k-token prompts, time to first token while 16
streams decode, and the memory each server holds, with flash attention on and off.

The models are made here (bench/random_gguf.py): Llama shapes with random weights and SmolLM2's tokenizer, in F16
and quantized to Q4_K_M by the build's llama-quantize, so nothing large is carried to a GPU machine. Each figure is
measured in ``--rounds`` rounds (at least 4) that alternate which server goes first; the report gives each one's
median, its spread (lowest and highest round) and localinfer's median over llama-server's.

- streams: S clients at once on ``/v1/completions``, each with its own short prompt, greedy, ``--tokens`` tokens
  with ``ignore_eos``; the figure is all tokens over the wall time from the common start to the last stream's end.
- prefill: ``/completion`` with a prompt of N random token ids (a new one each round, ``cache_prompt`` false) and
  ``n_predict`` 1; the figure is the server's own ``timings.prompt_per_second`` (both servers report it alike).
- ttft: while 16 streams decode (each has sent its first token), ``--probes`` requests one after another with a
  new prompt of 256 words and one token to generate (``/completion``, not streamed); p50 and p95 of the client's time
  to that answer. ``--probes 0`` leaves the phase out.
- memory: the GPU memory of each server's process (nvidia-smi), or its RSS with ``--cpu-only``, once loaded.

The servers of the streams and ttft phases have 65 slots of 512 tokens; those of the prefill phase one slot long
enough for the longest prompt. localinfer runs with its defaults and ``--localinfer-args`` (default ``--spec off
--no-last-token-alone``: a random model's greedy text repeats, which prompt lookup would turn into drafts no real model
gives, and a cold prompt's last token is computed in the prompt's batch, as llama-server computes it).

Usage: python bench/gpu_compare.py [--cpu-only] [--models 1b-F16,3b-Q4_K_M] [--fa on,off] [--rounds 4]
           [--tokenizer TOKENIZER.gguf] [--llama-cpp-bin DIR] [--work DIR] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchlib import (
    BenchError,
    ManagedServer,
    free_port,
    llama_cpp_bin,
    machine_info,
    percentile,
    stream_concurrently,
    write_json,
)
from random_gguf import SHAPES, quantize, write_random, write_tokenizer_only

GPU_MODELS = "1b-F16,1b-Q4_K_M,3b-F16,3b-Q4_K_M,8b-Q4_K_M,8b-F16"
CPU_MODELS = "tiny-F16,tiny-Q4_K_M,135m-Q4_K_M"
VOCAB = 49152  # SmolLM2's tokenizer, which every model here has
SLOT = 512  # tokens per slot in the streams phases
MAX_STREAMS = 64
LOAD_STREAMS = 16
ENGINES = ("llama-server", "localinfer")


def model_file(work: Path, tokenizer: Path, name: str, bin_dir: Path) -> Path:
    """``work/NAME.gguf`` (``3b-F16``, ``3b-Q4_K_M``), made unless it is there."""
    shape, kind = name.split("-", 1)
    path = work / f"{name}.gguf"
    if path.exists():
        return path
    f16 = work / f"{shape}-F16.gguf"
    if not f16.exists():
        started = time.perf_counter()
        write_random(tokenizer, f16, SHAPES[shape])
        print(f"made {f16.name} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if kind != "F16":
        quantize(bin_dir / "llama-quantize", f16, path, kind)
    return path


def server_cmd(engine: str, bin_dir: Path, model: Path, port: int, flags: list[str], extra: list[str]) -> list[str]:
    if engine == "llama-server":
        return [str(bin_dir / "llama-server"), "-m", str(model), "--port", str(port), "--host", "127.0.0.1", *flags]
    cli = [sys.executable, "-m", "localinfer.app.cli", "serve", str(model), "--port", str(port)]
    return [*cli, *flags, *extra]


@contextlib.contextmanager
def servers(args: argparse.Namespace, model: Path, flags: list[str], label: str) -> Iterator[dict[str, ManagedServer]]:
    started: dict[str, ManagedServer] = {}
    try:
        for engine in ENGINES:
            port = free_port()
            cmd = server_cmd(engine, args.bin_dir, model, port, flags, shlex.split(args.localinfer_args))
            log = args.logs / f"{label}-{engine}.log"
            started[engine] = ManagedServer(engine, cmd, port, log, startup_timeout=600)
            started[engine].start()
        yield started
    finally:
        for server in started.values():
            server.stop()


def memory_mib(server: ManagedServer, cpu_only: bool) -> float:
    """The GPU memory of the server's processes (nvidia-smi), or their RSS on a CPU."""
    pids = {server.pid, *(c.pid for c in psutil.Process(server.pid).children(recursive=True))}
    if cpu_only:
        return sum(psutil.Process(pid).memory_info().rss for pid in pids) / 2**20
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split(",") for line in out.strip().splitlines() if line.strip()]
    return float(sum(float(mem) for pid, mem in rows if int(pid) in pids))


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    topics = ["the sea", "a city at night", "an old clock", "mountains", "a library", "rain", "a train", "bread"]
    return [f"Story {seed}-{i}: write about {rng.choice(topics)} and {rng.choice(topics)}." for i in range(n)]


def streams_round(url: str, n: int, tokens: int, seed: int) -> tuple[float, str]:
    usage = {"include_usage": True}
    bodies = [
        {"prompt": p, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream_options": usage}
        for p in prompts(n, seed)
    ]
    wall, stats = stream_concurrently(url, bodies)
    return sum(s.tokens for s in stats) / wall, stats[0].text


def ttft_round(url: str, probes: int, seed: int) -> list[float]:
    """Start LOAD_STREAMS decoding streams, wait until each has sent a token, then time ``probes`` requests."""
    decoding = threading.Semaphore(0)
    stop = threading.Event()

    def load(i: int) -> None:
        body = {"prompt": prompts(1, seed * 100 + i)[0], "max_tokens": SLOT - 64, "temperature": 0, "stream": True}
        body["ignore_eos"] = True
        with httpx.Client() as client, client.stream("POST", f"{url}/v1/completions", json=body, timeout=600) as r:
            signalled = False
            for line in r.iter_lines():
                if line.startswith("data:") and not signalled:
                    decoding.release()
                    signalled = True
                if stop.is_set():
                    return  # closing the stream cancels the request
        if not signalled:
            decoding.release()

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(LOAD_STREAMS)]
    for t in threads:
        t.start()
    for _ in threads:
        if not decoding.acquire(timeout=300):
            raise BenchError("the decoding streams did not start within 300 s")
    rng = random.Random(seed)
    words = ["harbour", "lantern", "copper", "meadow", "signal", "winter", "garden", "engine", "silver", "window"]
    times = []
    with httpx.Client() as client:
        for _ in range(probes):
            text = " ".join(rng.choice(words) for _ in range(256))  # a word a token, about (SmolLM2's tokenizer)
            # One token asked, not streamed: its answer's time is the time to the first token, whatever the token
            # (a random model's may be an end token or a byte of a character, which a stream carries as no text).
            body = {"prompt": text, "n_predict": 1, "temperature": 0, "cache_prompt": False}
            sent = time.perf_counter()
            answer = client.post(f"{url}/completion", json=body, timeout=600)
            if answer.status_code != 200:
                raise BenchError(f"/completion -> {answer.status_code}: {answer.text[:300]}")
            times.append((time.perf_counter() - sent) * 1000.0)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    return times


def prefill_round(url: str, n_tokens: int, seed: int, vocab: int) -> float:
    rng = random.Random(seed)
    ids = [rng.randrange(1000, vocab - 1000) for _ in range(n_tokens)]
    body = {"prompt": ids, "n_predict": 1, "temperature": 0, "cache_prompt": False}
    answer = httpx.post(f"{url}/completion", json=body, timeout=1200)
    if answer.status_code != 200:
        raise BenchError(f"/completion -> {answer.status_code}: {answer.text[:300]}")
    timings = answer.json()["timings"]
    if int(timings["prompt_n"]) < n_tokens - 1:
        raise BenchError(f"only {timings['prompt_n']} of {n_tokens} prompt tokens were computed")
    return float(timings["prompt_per_second"])


def alternate(rounds: int, measure: Callable[[str, int], Any]) -> dict[str, list[Any]]:
    """``measure(engine, round)`` for both engines, ``rounds`` times, the first engine alternating."""
    out: dict[str, list[Any]] = {engine: [] for engine in ENGINES}
    for r in range(rounds):
        for engine in ENGINES if r % 2 == 0 else ENGINES[::-1]:
            out[engine].append(measure(engine, r))
    return out


def summary(values: dict[str, list[float]]) -> dict[str, Any]:
    med = {e: statistics.median(v) for e, v in values.items()}
    return {
        "rounds": values,
        "median": med,
        "spread": {e: [min(v), max(v)] for e, v in values.items()},
        "ratio": med["localinfer"] / med["llama-server"] if med["llama-server"] else None,
    }


def prefill_phase(args: argparse.Namespace, model: Path, flags: list[str], result: dict[str, Any]) -> None:
    """Prefill of each ``args.prefill`` size on servers of one slot started with ``flags``, into ``result``."""
    name, fa = result["model"], result["flash_attn"]
    with servers(args, model, flags, f"{name}-fa{fa}-prefill") as up:
        for n in args.prefill:

            def prefill(engine: str, r: int, n: int = n) -> float:
                return prefill_round(up[engine].base_url, n, r * 7 + n, VOCAB)

            result[f"prefill_{n}"] = summary(alternate(args.rounds, prefill))
            write_json(args.partial, result)
            print(f"{name} fa {fa}: prefill {n} {result[f'prefill_{n}']['median']}", file=sys.stderr)


def run_model(args: argparse.Namespace, name: str, fa: str) -> dict[str, Any]:
    """One model with flash attention ``fa``: prefill first (the figure #42 found behind), then streams and TTFT;
    what is measured is written to ``args.partial`` as it comes."""
    model = model_file(args.work, args.tokenizer, name, args.bin_dir)
    common = ["-ngl", "0" if args.cpu_only else "99", "-fa", fa]
    result: dict[str, Any] = {"model": name, "flash_attn": fa, "size_mib": model.stat().st_size >> 20}
    if args.prefill:  # ("": no prefill phase)
        prefill_phase(args, model, [*common, "-c", str(max(args.prefill) + 256), "-np", "1"], result)
    n_slots = MAX_STREAMS + 1
    flags = [*common, "-c", str(SLOT * n_slots), "-np", str(n_slots)]
    with servers(args, model, flags, f"{name}-fa{fa}-streams") as up:
        result["memory_mib"] = {e: memory_mib(s, args.cpu_only) for e, s in up.items()}
        texts: dict[str, str] = {}
        for n in args.streams:

            def measure(engine: str, r: int, n: int = n) -> float:
                tps, text = streams_round(up[engine].base_url, n, args.tokens, seed=r)
                if n == 1:
                    texts.setdefault(engine, text)
                return tps

            result[f"streams_{n}"] = summary(alternate(args.rounds, measure))
            write_json(args.partial, result)
            print(f"{name} fa {fa}: {n} streams {result[f'streams_{n}']['median']}", file=sys.stderr)
        result["same_greedy_text_1_stream"] = len(set(texts.values())) == 1
        if not args.probes:
            return result
        ttft = alternate(args.rounds, lambda e, r: ttft_round(up[e].base_url, args.probes, r))
        flat = {e: [t for rnd in v for t in rnd] for e, v in ttft.items()}
        result["ttft_ms_under_16_streams"] = {
            e: {"p50": percentile(v, 50), "p95": percentile(v, 95), "n": len(v)} for e, v in flat.items()
        }
        write_json(args.partial, result)
        print(f"{name} fa {fa}: ttft {result['ttft_ms_under_16_streams']}", file=sys.stderr)
    return result


def markdown(results: list[dict[str, Any]], streams: list[int], prefill: list[int]) -> str:
    head = ["model", "FA", *(f"{n} streams tok/s" for n in streams), *(f"prefill {n}" for n in prefill)]
    head += ["TTFT p50/p95 ms (16 decoding)", "memory MiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(entry: dict[str, Any]) -> str:
        li, ls = entry["median"]["localinfer"], entry["median"]["llama-server"]
        lo, hi = entry["spread"]["localinfer"]
        return f"{li:,.0f} vs {ls:,.0f} ({li / ls:.2f}x; ours {lo:,.0f} to {hi:,.0f})"

    for r in results:
        t = r.get("ttft_ms_under_16_streams")
        row = [r["model"], r["flash_attn"], *(cell(r[f"streams_{n}"]) for n in streams)]
        row += [cell(r[f"prefill_{n}"]) for n in prefill]
        row.append(
            f"{t['localinfer']['p50']:.0f}/{t['localinfer']['p95']:.0f} vs "
            f"{t['llama-server']['p50']:.0f}/{t['llama-server']['p95']:.0f}"
            if t
            else "not measured"
        )
        row.append(f"{r['memory_mib']['localinfer']:,.0f} vs {r['memory_mib']['llama-server']:,.0f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-only", action="store_true", help="no GPU: small shapes, every layer on the CPU, RSS")
    p.add_argument("--models", help=f"default {GPU_MODELS} (with --cpu-only: {CPU_MODELS})")
    p.add_argument("--fa", default="on,off", help="flash attention settings to run (default on,off)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--streams", type=ints, default=[1, 16, 64])
    p.add_argument("--tokens", type=int, default=128, help="tokens per stream (default 128; 32 with --cpu-only)")
    p.add_argument("--prefill", type=ints, default=[2048, 8192], help='prompt sizes ("": no prefill phase)')
    p.add_argument("--probes", type=int, default=8, help="TTFT requests per round while 16 streams decode")
    p.add_argument("--tokenizer", type=Path, help="a GGUF with SmolLM2's tokenizer (default: the tests' SmolLM2)")
    p.add_argument("--llama-cpp-bin", type=Path, help="llama-server and llama-quantize (default: build-llama-cpp)")
    p.add_argument("--localinfer-args", default="--spec off --no-last-token-alone")
    p.add_argument("--work", type=Path, default=Path("/tmp/gpu-compare"))
    p.add_argument("--out", type=Path, help="results JSON (default WORK/results.json) and a .md beside it")
    args = p.parse_args()
    # `timeout` ends a run cut short with SIGTERM: exit through the servers' finally blocks, not around them.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.rounds < 4:
        p.error("--rounds must be at least 4")
    if args.cpu_only and "--tokens" not in sys.argv:
        args.tokens = 32
    args.work.mkdir(parents=True, exist_ok=True)
    args.bin_dir = llama_cpp_bin(args.llama_cpp_bin, ("llama-server", "llama-quantize"))
    source = args.tokenizer or next(Path.home().glob(".cache/localinfer/test-home/models/blobs/sha256-b179c95*"))
    args.tokenizer = args.work / "tokenizer.gguf"
    if not args.tokenizer.exists():
        write_tokenizer_only(source, args.tokenizer)
    out = args.out or args.work / "results.json"
    # Beside the results, so that a run cut short by the device's time limit still brings back what it measured.
    args.partial = out.with_name("partial.json")
    args.logs = out.parent / "logs"
    names = (args.models or (CPU_MODELS if args.cpu_only else GPU_MODELS)).split(",")
    results = []
    for name in names:
        for fa in args.fa.split(","):
            results.append(run_model(args, name, fa))
            write_json(out, {"machine": machine_info(), "args": sys.argv[1:], "results": results})
    table = markdown(results, args.streams, args.prefill)
    out.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
