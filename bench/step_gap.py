"""The host's time between two decode steps of one stream in `localinfer serve` (issue #42): from the moment a token's
logits are read to the next ``llama_decode``, with the server's HTTP side at work on the token before. On a GPU the
GPU waits through all of it, so it is what one stream loses against llama-server's C++ loop (the 1B F16 on an H200
decoded at 0.95x there, at 1.6 ms a step); on a CPU it is time the cores do not compute the model either.

The server runs with a ``sitecustomize`` (written to a temporary folder put first on its PYTHONPATH) that times those
two calls in llama-cpp-python's module and sets the step loop's ``queued_decode``: ``cpu`` hands a step's tokens
to the HTTP side before the next step's decode, ``gpu`` after it is queued (StepLoop), ``auto`` as the model is
placed. Each round streams ``--tokens`` greedy tokens (``ignore_eos``) from ``/v1/completions``; the report gives the
median and 90th percentile gap over every step of the rounds, and the client's decode rate, for each way.

With ``--streams N``, N streams at once on N slots: the gap is from a step's first logits read to the next
``llama_decode``, counted where that next step holds a token of each stream (every slot's sampling and the next
batch are in it), and the rate is the total over the wall time.

Usage: python bench/step_gap.py [--model PATH] [--ways cpu,gpu] [--rounds 3] [--tokens 300] [--streams 1]
           [--serve-args "--gpu-layers 99"] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchlib import (
    ManagedServer,
    free_port,
    greedy_body,
    install_sigterm_handler,
    machine_info,
    stream_concurrently,
)

SITECUSTOMIZE = """
import os, time
import llama_cpp.llama_cpp as lc
from localinfer.backends.llamacpp import step_loop

_decode, _logits = lc.llama_decode, lc.llama_get_logits_ith
_out = open(os.environ["STEP_GAP_OUT"], "a", buffering=1)
_streams = int(os.environ.get("STEP_GAP_STREAMS", "1"))
_read = [None]


def llama_decode(ctx, batch):
    started = time.perf_counter()
    if _read[0] is not None and batch.n_tokens == _streams:
        _out.write(f"{(started - _read[0]) * 1e6:.1f}\\n")
    _read[0] = None
    return _decode(ctx, batch)


def llama_get_logits_ith(ctx, i):
    logits = _logits(ctx, i)
    if _read[0] is None:  # the step's first: every slot's sampling is in the gap
        _read[0] = time.perf_counter()
    return logits


lc.llama_decode, lc.llama_get_logits_ith = llama_decode, llama_get_logits_ith
_init = step_loop.StepLoop.__init__
_way = os.environ.get("STEP_GAP_WAY", "auto")


def __init__(self, *args, **kwargs):
    if _way != "auto":
        kwargs["queued_decode"] = _way == "gpu"
    _init(self, *args, **kwargs)


step_loop.StepLoop.__init__ = __init__
"""


def measure_way(args: argparse.Namespace, way: str, work: Path) -> dict[str, Any]:
    gaps_file = work / f"gaps-{way}.txt"
    gaps_file.write_text("")
    env = {"STEP_GAP_OUT": str(gaps_file), "STEP_GAP_WAY": way, "STEP_GAP_STREAMS": str(args.streams)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(work), os.environ.get("PYTHONPATH", "")) if p)
    port = free_port()
    cmd = [sys.executable, "-m", "localinfer.app.cli", "serve", str(args.model), "--port", str(port)]
    cmd += ["--parallel", str(args.streams), "--spec", "off", *shlex.split(args.serve_args)]
    rates = []
    with ManagedServer(f"localinfer ({way})", cmd, port, work / f"serve-{way}.log", env=env) as server:
        for r in range(args.rounds + 1):  # round 0 warms up and is not counted
            bodies = [
                greedy_body(server.model_id("model"), args.tokens, prompt=f"Round {r}, story {i}: once upon a time")
                for i in range(args.streams)
            ]
            wall, stats = stream_concurrently(server.base_url, bodies)
            if r == 0:
                gaps_file.write_text("")
            else:
                rates.append(stats[0].decode_tps if args.streams == 1 else sum(s.tokens for s in stats) / wall)
    gaps = [float(line) for line in gaps_file.read_text().split()]
    if len(gaps) < args.rounds * (args.tokens // 2):  # the steps where every stream generated
        raise SystemExit(f"{way}: only {len(gaps)} steps were timed; see {work / f'serve-{way}.log'}")
    gaps.sort()
    return {
        "gap_us_median": statistics.median(gaps),
        "gap_us_p90": gaps[int(len(gaps) * 0.9)],
        "steps": len(gaps),
        "decode_tps": rates,
        "decode_tps_median": statistics.median(rates),
    }


def main() -> int:
    install_sigterm_handler()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="a GGUF (default: the tests' SmolLM2)")
    p.add_argument("--ways", default="cpu,gpu", help="cpu, gpu and/or auto (default cpu,gpu)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=300)
    p.add_argument("--streams", type=int, default=1, help="concurrent streams, a slot each (default 1)")
    p.add_argument("--serve-args", default="", help="more `localinfer serve` flags, e.g. --gpu-layers 99")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    args.model = args.model or next(Path.home().glob(".cache/localinfer/test-home/models/blobs/sha256-b179c95*"))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="step-gap-") as tmp:
        work = Path(tmp)
        (work / "sitecustomize.py").write_text(SITECUSTOMIZE)
        for way in args.ways.split(","):
            results[way] = measure_way(args, way, work)
            row = results[way]
            print(
                f"{way}: gap median {row['gap_us_median']:.0f} us, p90 {row['gap_us_p90']:.0f} us over "
                f"{row['steps']} steps; decode {row['decode_tps_median']:.1f} tok/s",
                file=sys.stderr,
            )
    report = {"machine": machine_info(), "args": sys.argv[1:], "model": str(args.model), "results": results}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
