"""How fast the command line answers: ``localinfer --version`` and ``--help``, next to ``llama-server --version``
(and ``ollama --version`` when Ollama is installed), run in alternation, with min / median / max of repeated runs.

``localinfer`` imports the heavy libraries (llama.cpp, ONNX Runtime, Textual, FastAPI, numpy) only in the
commands that use them; the target (issue 17) is < 0.3 s for ``--version`` from the source install. A packaged
build is timed the same way with ``--localinfer PATH/TO/dist/localinfer``.

Usage: .venv/bin/python bench/startup.py [--rounds 10] [--localinfer CMD] [--llama-bin DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import REPO_ROOT, RESULTS_DIR, BenchError, llama_cpp_bin, machine_info, write_json


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(command)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--localinfer", default=str(REPO_ROOT / ".venv" / "bin" / "localinfer"), help="the command to time"
    )
    parser.add_argument("--llama-bin", type=Path, help="folder with llama-server (default: bench/build-llama-cpp)")
    args = parser.parse_args()
    commands = {
        "localinfer --version": [args.localinfer, "--version"],
        "localinfer --help": [args.localinfer, "--help"],
        "llama-server --version": [str(llama_cpp_bin(args.llama_bin) / "llama-server"), "--version"],
    }
    ollama = shutil.which("ollama")
    if ollama:
        commands["ollama --version"] = [ollama, "--version"]
    for command in commands.values():  # warm the page cache: every engine starts from a warm disk
        seconds(command)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, command in commands.items():
            times[name].append(seconds(command))
    print(f"| command | min s | median s | max s | runs |  ({args.rounds} rounds, alternating)")
    print("|---|---:|---:|---:|---:|")
    summary = {}
    for name, values in times.items():
        summary[name] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
        s = summary[name]
        print(f"| `{name}` | {s['min']:.3f} | {s['median']:.3f} | {s['max']:.3f} | {len(values)} |")
    if not ollama:
        print("ollama is not installed here: not compared", file=sys.stderr)
    write_json(
        RESULTS_DIR / "startup.json",
        {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, "summary": summary},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
