"""How fast the command line answers: ``localinfer --version`` and ``--help``, next to ``llama-server --version``
(and ``ollama --version`` when Ollama is installed), run in alternation, with min / median / max of repeated runs.

``localinfer`` imports the heavy libraries (llama.cpp, ONNX Runtime, Textual, FastAPI, numpy) only in the
commands that use them; the target (issue 17) is < 0.3 s for ``--version`` from the source install. A packaged
build is timed the same way with ``--localinfer PATH/TO/dist/localinfer``.

With ``--serve-app APP`` (the one file that carries the starter, ``packaging/build --with-model smollm2``) it
also times ``APP serve`` from start to ``GET /health`` answering 200 with the starter loaded (target < 3 s; the
starter is unpacked into a scratch home by a first, untimed start).

Usage: .venv/bin/python bench/startup.py [--rounds 10] [--localinfer CMD] [--llama-bin DIR] [--serve-app APP]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchlib import REPO_ROOT, RESULTS_DIR, BenchError, free_port, llama_cpp_bin, machine_info, write_json


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(command)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return elapsed


def serve_until_healthy(app: str, home: Path) -> float:
    """Seconds from starting ``app serve`` (the starter it carries) to /health answering 200."""
    port = free_port()
    env = {"PATH": "/nonexistent", "HOME": str(home), "LOCALINFER_DISCOVER": "false"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [app, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        while True:
            if proc.poll() is not None:
                raise BenchError(f"{app} serve exited {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):  # not listening yet
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return time.perf_counter() - started
            time.sleep(0.02)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--localinfer", default=str(REPO_ROOT / ".venv" / "bin" / "localinfer"), help="the command to time"
    )
    parser.add_argument("--llama-bin", type=Path, help="folder with llama-server (default: bench/build-llama-cpp)")
    parser.add_argument(
        "--app", action="append", default=[], help="a packaged build to time as well (repeatable): dist/localinfer"
    )
    parser.add_argument("--serve-app", help="the packaged app carrying the starter: also time serve to healthy")
    args = parser.parse_args()
    commands = {
        "localinfer --version": [args.localinfer, "--version"],
        "localinfer --help": [args.localinfer, "--help"],
        "llama-server --version": [str(llama_cpp_bin(args.llama_bin) / "llama-server"), "--version"],
    }
    for app in args.app:
        commands[f"{Path(app).parent.name}/{Path(app).name} --version"] = [app, "--version"]
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
    if args.serve_app:
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as home:
            serve_until_healthy(args.serve_app, Path(home))  # unpacks the starter once
            serve = [serve_until_healthy(args.serve_app, Path(home)) for _ in range(max(3, args.rounds // 2))]
        summary["serve to healthy"] = {"min": min(serve), "median": statistics.median(serve), "max": max(serve)}
        s = summary["serve to healthy"]
        print(f"| `{Path(args.serve_app).name} serve` to healthy | {s['min']:.3f} | {s['median']:.3f} "
              f"| {s['max']:.3f} | {len(serve)} |")  # fmt: skip
    if not ollama:
        print("ollama is not installed here: not compared", file=sys.stderr)
    write_json(
        RESULTS_DIR / "startup.json",
        {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, "summary": summary},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
