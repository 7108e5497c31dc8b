"""Quantizing and measuring perplexity: localinfer's commands against llama.cpp's own tools, in the same run.

Each round runs, in alternation, ``llama-quantize SRC OUT TYPE T`` and ``localinfer quantize SRC --type TYPE``
(into a scratch home: the file is hashed and registered too, as a user gets it), then ``llama-perplexity`` and
``localinfer perplexity`` on the same text, context and chunks. Wall time of each command, as a user waits for it
(start-up and model loading included on both sides). Reported: each command's median, and the ratios per round
(quantize: ours / theirs, target 1 +- 0.1; perplexity: our tokens/s / theirs, target >= 0.9), median and range.

The source is an F16 GGUF; without ``--source``, one is made from ``--from`` (a quantized GGUF, e.g. the SmolLM2
Q4_1 test model) by llama-quantize --allow-requantize, as tests/quantize/conftest.py makes its F16.

Usage: .venv/bin/python bench/quantize.py (--source F16.gguf | --from Q.gguf) [--type Q4_K_M] [--rounds 3]
       [--ctx 512] [--chunks 4] [--threads 2] [--llama-bin DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import REPO_ROOT, RESULTS_DIR, BenchError, llama_cpp_bin, machine_info, write_json

LOCALINFER = REPO_ROOT / ".venv" / "bin" / "localinfer"
DEFAULT_TEXT = REPO_ROOT / "src" / "localinfer" / "quantize" / "data" / "default.txt"


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(command)} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return elapsed


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--source", type=Path, help="an F16 (or F32, BF16) GGUF")
    source.add_argument("--from", dest="from_", type=Path, help="a quantized GGUF to make the F16 source from")
    parser.add_argument("--type", default="Q4_K_M")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ctx", type=int, default=512)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--llama-bin", type=Path)
    args = parser.parse_args()
    tools = llama_cpp_bin(args.llama_bin)
    threads = str(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-quantize-") as scratch_dir:
        scratch = Path(scratch_dir)
        src = args.source
        if src is None:
            src = scratch / "source-f16.gguf"
            timed([str(tools / "llama-quantize"), "--allow-requantize", str(args.from_), str(src), "F16", threads])
        env = {**os.environ, "LOCALINFER_CONFIG": str(scratch / "no-config.toml")}
        theirs_q: list[float] = []
        ours_q: list[float] = []
        theirs_p: list[float] = []
        ours_p: list[float] = []
        for round_no in range(args.rounds):
            out = scratch / "theirs.gguf"
            theirs_q.append(timed([str(tools / "llama-quantize"), str(src), str(out), args.type, threads]))
            out.unlink()
            env["LOCALINFER_HOME"] = str(scratch / f"home-{round_no}")
            ours_q.append(
                timed(
                    [str(LOCALINFER), "quantize", str(src), "--type", args.type, "--threads", threads, "--quiet"],
                    env,
                )
            )
            theirs_p.append(
                timed(
                    [
                        *(str(tools / "llama-perplexity"), "-m", str(src), "-f", str(args.text)),
                        *("-c", str(args.ctx), "--chunks", str(args.chunks), "-t", threads, "-b", str(args.ctx)),
                    ],
                )
            )
            ours_p.append(
                timed(
                    [
                        *(str(LOCALINFER), "perplexity", str(src), "--text", str(args.text)),
                        *("--ctx", str(args.ctx), "--chunks", str(args.chunks), "--threads", threads, "--json"),
                    ],
                    env,
                )
            )
            print(
                f"round {round_no + 1}: quantize {ours_q[-1]:.2f}s vs {theirs_q[-1]:.2f}s, "
                f"perplexity {ours_p[-1]:.2f}s vs {theirs_p[-1]:.2f}s",
                file=sys.stderr,
            )
    quantize_ratio = [o / t for o, t in zip(ours_q, theirs_q, strict=True)]
    speed_ratio = [t / o for o, t in zip(ours_p, theirs_p, strict=True)]  # tokens/s: same tokens on both
    tokens = args.ctx * args.chunks
    print(f"| {args.type} from F16, {args.rounds} rounds | localinfer s | llama.cpp s | ratio median (range) |")
    print("|---|---:|---:|---:|")
    print(
        f"| quantize (ours / theirs, time) | {statistics.median(ours_q):.2f} | {statistics.median(theirs_q):.2f} "
        f"| {spread(quantize_ratio)} |"
    )
    print(
        f"| perplexity, {args.chunks} x {args.ctx} tokens (ours / theirs, tokens/s) | {statistics.median(ours_p):.2f} "
        f"| {statistics.median(theirs_p):.2f} | {spread(speed_ratio)} |"
    )
    write_json(
        RESULTS_DIR / "quantize.json",
        {
            "machine": machine_info(),
            "args": {k: str(v) for k, v in vars(args).items()},
            "seconds": {
                "ours_quantize": ours_q,
                "theirs_quantize": theirs_q,
                "ours_ppl": ours_p,
                "theirs_ppl": theirs_p,
            },
            "perplexity_tokens": tokens,
            "quantize_ratio": quantize_ratio,
            "perplexity_speed_ratio": speed_ratio,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
