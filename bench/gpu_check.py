"""The CUDA path, end to end: ``localinfer hw``, then ``localinfer serve MODEL`` three times on the same machine with
the same greedy requests: every layer on the GPU (``gpu``), ``--gpu-layers 0`` (``cpu``: the weights stay on the
CPU, but a CUDA build of llama.cpp still sends prompt batches to the GPU), and the GPU hidden from the process with
``CUDA_VISIBLE_DEVICES=""`` (``nogpu``: what a CPU-only machine runs).

For each server it records what llama.cpp logged about the devices and the layers it offloaded (the server runs
with ``LOCALINFER_DEBUG=1``, which routes llama.cpp's log to the server's log), ``GET /api/ps`` and
``/api/localinfer/status``, ``nvidia-smi``'s memory while the model is loaded, and ``--rounds`` chat completions
(temperature 0, ``ignore_eos``, ``--tokens`` tokens each) with the server's own ``timings``: decode tok/s
(llama-server's ``predicted_per_second``) and prompt tok/s. Greedy text is compared across rounds and servers.

It runs where ``python -m localinfer.app.cli`` runs (``src/`` on PYTHONPATH, or an install). ``bench/gpu_check.sh``
runs it on a lent GPU machine; on a machine without a GPU, ``--cpu-only`` runs the ``cpu`` server alone.

Usage: python bench/gpu_check.py MODEL.gguf [--rounds 5] [--tokens 256] [--serve-args="--spec off"] [--cpu-only]
       [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib import ManagedServer, free_port, machine_info

PROMPT = (
    "Write a long story about a lighthouse keeper who finds a message in a bottle. "
    "Describe the sea, the weather and the keeper's thoughts in detail."
)
# llama.cpp's lines that say which devices it found, where the weights, cache and buffers went, and the plan.
DEVICE_LINES = re.compile(
    r"ggml_cuda_init|Device \d|using device|failed to initialize|offload|buffer size|plan for", re.IGNORECASE
)
PER_LAYER = re.compile(r"\blayer\s+\d+")
# name, serve flags, environment
CONFIGS: list[tuple[str, list[str], dict[str, str]]] = [
    ("gpu", ["--gpu-layers", "-1"], {}),
    ("cpu", ["--gpu-layers", "0"], {}),
    ("nogpu", ["--gpu-layers", "0"], {"CUDA_VISIBLE_DEVICES": ""}),
]


def localinfer(*args: str) -> list[str]:
    return [sys.executable, "-m", "localinfer.app.cli", *args]


def run_command(cmd: list[str], env: dict[str, str], timeout: float = 120.0) -> str:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return f"$ localinfer {' '.join(cmd[3:])}  (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"


def nvidia_smi() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["--query-gpu=name,driver_version,memory.used,memory.total", "--format=csv,noheader"]
    apps = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]
    out = []
    for args in (query, apps):
        proc = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30, check=False)
        out.append(proc.stdout.strip() or proc.stderr.strip())
    return "\n".join(out)


def chat(client: httpx.Client, url: str, model: str, tokens: int, *, ignore_eos: bool) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": ignore_eos,
    }
    started = time.perf_counter()
    resp = client.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    wall = time.perf_counter() - started
    resp.raise_for_status()
    data: dict[str, Any] = resp.json()
    timings = data.get("timings") or {}
    return {
        "text": data["choices"][0]["message"]["content"],
        "completion_tokens": data["usage"]["completion_tokens"],
        "decode_tps": timings.get("predicted_per_second"),
        "prompt_tps": timings.get("prompt_per_second"),
        "wall_s": round(wall, 3),
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 1), "min": round(min(values), 1), "max": round(max(values), 1)}


def first_difference(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def serve_and_measure(
    name: str, model: Path, extra: list[str], env: dict[str, str], out: Path, rounds: int, tokens: int
) -> dict[str, Any]:
    port = free_port()
    log = out / f"serve-{name}.log"
    cmd = localinfer("serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--ctx-size", "2048", *extra)
    result: dict[str, Any] = {"name": name, "args": extra, "env": {k: v for k, v in env.items() if k.isupper()}}
    started = time.perf_counter()
    with (
        ManagedServer(f"localinfer serve ({name})", cmd, port, log, env=env) as server,
        httpx.Client() as client,
    ):
        result["ready_s"] = round(time.perf_counter() - started, 2)
        model_id = server.model_id(model.name)
        ps = client.get(f"{server.base_url}/api/ps", timeout=30).json()
        result["api_ps"] = [{k: m.get(k) for k in ("name", "size", "size_vram")} for m in ps.get("models", [])]
        status = client.get(f"{server.base_url}/api/localinfer/status", timeout=30).json()
        result["loaded"] = status.get("loaded")
        chat(client, server.base_url, model_id, 16, ignore_eos=True)  # warm-up, unmeasured
        result["nvidia_smi_loaded"] = nvidia_smi()
        runs = [chat(client, server.base_url, model_id, tokens, ignore_eos=True) for _ in range(rounds)]
        natural = chat(client, server.base_url, model_id, tokens, ignore_eos=False)
    lines = log.read_text(errors="replace").splitlines()
    # Per-layer lines ("layer 3 assigned to device CUDA0") are summed up by llama.cpp's own "offloaded N/M" line.
    result["device_lines"] = [
        line.strip()[:400] for line in lines if DEVICE_LINES.search(line) and not PER_LAYER.search(line)
    ]
    texts = [r["text"] for r in runs]
    result.update(
        decode_tps=spread([r["decode_tps"] for r in runs]),
        prompt_tps=spread([r["prompt_tps"] for r in runs]),
        decode_tps_rounds=[r["decode_tps"] for r in runs],
        completion_tokens=[r["completion_tokens"] for r in runs],
        rounds_same_text=len(set(texts)) == 1,
        rounds_first_difference=[first_difference(texts[0], t) for t in texts[1:]],
        texts=texts,
        natural_text=natural["text"],
        natural_tokens=natural["completion_tokens"],
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a .gguf file (the first part of a split one)")
    parser.add_argument("--rounds", type=int, default=5, help="measured requests per server (default 5)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per request (default 256)")
    parser.add_argument("--serve-args", default="", help='more flags for every server, e.g. "--spec off"')
    parser.add_argument("--cpu-only", action="store_true", help="only the cpu server (a machine without a GPU)")
    parser.add_argument("--out", type=Path, help="where logs and gpu_check.json go (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="gpu-check-home-"))
    try:
        return check(args, out, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def check(args: argparse.Namespace, out: Path, home: Path) -> int:
    env = {
        "LOCALINFER_HOME": str(home),
        "LOCALINFER_CONFIG": str(home / "no-config.toml"),
        "PYTHONUNBUFFERED": "1",
    }
    report: dict[str, Any] = {"machine": machine_info(), "model": str(args.model), "serve_args": args.serve_args}
    hw_env = {**os.environ, **env}
    for cmd in (localinfer("hw"), localinfer("hw", "--plan", str(args.model))):
        text = run_command(cmd, hw_env)
        print(text, flush=True)
        report.setdefault("hw", []).append(text)
    hw_json = subprocess.run(localinfer("hw", "--json"), env=hw_env, capture_output=True, text=True, check=False)
    report["hw_gpus"] = json.loads(hw_json.stdout).get("gpus") if hw_json.returncode == 0 else hw_json.stderr
    report["nvidia_smi_idle"] = nvidia_smi()

    configs = [c for c in CONFIGS if c[0] == "cpu"] if args.cpu_only else CONFIGS
    for name, extra, extra_env in configs:
        server_env = {**env, "LOCALINFER_DEBUG": "1", **extra_env}
        flags = [*extra, *shlex.split(args.serve_args)]
        result = serve_and_measure(name, args.model, flags, server_env, out, args.rounds, args.tokens)
        report[name] = result
        shown = {k: v for k, v in result.items() if k not in ("texts", "natural_text")}
        print(f"== {name}\n{json.dumps(shown, indent=2)}", flush=True)
        print(f"-- {name}, first round's greedy text:\n{result['texts'][0]}\n", flush=True)
    names = [c[0] for c in configs]
    print("== summary")
    for name in names:
        r = report[name]
        print(
            f"{name:6} decode tok/s {r['decode_tps']}, prompt tok/s {r['prompt_tps']}, "
            f"rounds' greedy text alike: {r['rounds_same_text']} (first differences {r['rounds_first_difference']})"
        )
    if "gpu" in report:
        gpu = report["gpu"]
        for other in ("cpu", "nogpu"):
            o = report[other]
            at = first_difference(gpu["texts"][0], o["texts"][0])
            report[f"gpu_vs_{other}"] = {
                "decode_speedup": round(gpu["decode_tps"]["median"] / o["decode_tps"]["median"], 2),
                "prompt_speedup": round(gpu["prompt_tps"]["median"] / o["prompt_tps"]["median"], 2),
                "first_round_text_first_difference": at,
            }
            print(f"gpu vs {other}: {report[f'gpu_vs_{other}']}")
            if at is not None:
                print(f"  gpu:    {gpu['texts'][0][max(at - 40, 0) : at + 60]!r}")
                print(f"  {other}: {o['texts'][0][max(at - 40, 0) : at + 60]!r}")
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    print(f"report: {out / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
