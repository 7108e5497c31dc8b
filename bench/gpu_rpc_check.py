"""A model over an RPC worker that lends a GPU, on one GPU machine (#32): ``localinfer rpc`` (which lends the GPUs by
default), ``localinfer hw --plan --rpc`` and ``localinfer serve --rpc`` with the GPU hidden from the server
(``CUDA_VISIBLE_DEVICES=""``), so every layer it offloads goes to the worker's GPU as it would to another machine's.

Recorded: what the worker logged, the plan, one greedy chat completion over the worker against the same request to
``serve --gpu-layers -1`` on the local GPU (text compared), ``/api/localinfer/status``'s devices, ``localinfer ps``,
``/health``'s workers, nvidia-smi's processes, then a worker killed mid-stream: how long until the error event, and
what the next request and ``/health`` say.

It runs where ``python -m localinfer.app.cli`` runs, with LOCALINFER_HOME holding the model (``bench/gpu_check.sh
check-rpc`` sets both up on a lent GPU machine).

Usage: python bench/gpu_rpc_check.py [--model smollm2] [--tokens 128] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib import HOST, ManagedServer, free_port
from gpu_check import PROMPT, chat, first_difference, localinfer, nvidia_smi, run_command

HIDE_GPU = ["env", "CUDA_VISIBLE_DEVICES="]  # for ManagedServer, which takes no environment
NO_GPU_ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def show(title: str, text: str | None) -> None:
    print(f"--- {title}\n{(text or '(none)').rstrip()}", flush=True)


def start_worker(out: Path, name: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    log = (out / f"{name}.log").open("wb")
    worker = subprocess.Popen(
        localinfer("rpc", "--port", str(port)), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
        except OSError:
            time.sleep(0.2)  # not listening yet
            continue
        return worker, port
    raise SystemExit(f"the worker did not listen on {port}: {(out / f'{name}.log').read_text()[-2000:]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--out", type=Path, default=Path("/tmp/gpu-rpc-check"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}

    client = httpx.Client()
    local_port = free_port()
    local_cmd = localinfer("serve", args.model, "--host", HOST, "--port", str(local_port))
    local_cmd += ["--gpu-layers", "-1", "--spec", "off"]
    with ManagedServer("local-gpu", local_cmd, local_port, args.out / "serve-local-gpu.log") as local:
        local_answer = chat(client, local.base_url, args.model, args.tokens, ignore_eos=True)
    report["local_gpu"] = local_answer
    show("local GPU (serve --gpu-layers -1)", json.dumps(local_answer))

    worker, port = start_worker(args.out, "worker")
    endpoint = f"{HOST}:{port}"
    try:
        plan = run_command(localinfer("hw", "--plan", args.model, "--rpc", endpoint), NO_GPU_ENV)
        show("hw --plan over the worker (the server's GPU hidden)", plan)
        report["plan"] = plan
        serve_port = free_port()
        serve_cmd = HIDE_GPU + localinfer("serve", args.model, "--host", HOST, "--port", str(serve_port))
        serve_cmd += ["--rpc", endpoint, "--spec", "off"]
        with ManagedServer("rpc-gpu", serve_cmd, serve_port, args.out / "serve-rpc.log") as server:
            answer = chat(client, server.base_url, args.model, args.tokens, ignore_eos=True)
            report["over_rpc"] = answer
            show("over the GPU worker", json.dumps(answer))
            parted = first_difference(answer["text"], local_answer["text"])
            report["same_text_as_local_gpu"] = parted is None
            show("greedy text over RPC == local GPU", "yes" if parted is None else f"no: parted at character {parted}")
            status = client.get(f"{server.base_url}/api/localinfer/status", timeout=30).json()
            report["status_loaded"] = status.get("loaded")
            show("/api/localinfer/status: devices", json.dumps([m.get("devices") for m in status.get("loaded") or []]))
            show("localinfer ps", run_command(localinfer("ps", "--url", server.base_url), dict(os.environ)))
            show("/health", client.get(f"{server.base_url}/health", timeout=30).text)
            show("nvidia-smi", nvidia_smi())
            show("the worker's pid", str(worker.pid))

            body = {"model": args.model, "prompt": PROMPT, "max_tokens": 4000, "temperature": 0, "ignore_eos": True}
            body["stream"] = True
            events: list[str] = []
            with client.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=120) as stream:
                killed_at = 0.0
                for line in stream.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    events.append(line)
                    if len(events) == 20:
                        os.killpg(worker.pid, signal.SIGKILL)
                        killed_at = time.monotonic()
                    if killed_at and "error" in line:
                        report["error_after_kill_s"] = round(time.monotonic() - killed_at, 2)
                        show("error event after the kill", f"{report['error_after_kill_s']} s: {line[:300]}")
                        break
            after = client.post(
                f"{server.base_url}/v1/completions", json={**body, "stream": False, "max_tokens": 4}, timeout=60
            )
            show("the next request", f"{after.status_code} {after.text[:300]}")
            show("/health after", client.get(f"{server.base_url}/health", timeout=30).text)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
    show("the worker's log (its start)", (args.out / "worker.log").read_text(errors="replace")[:1500])
    (args.out / "gpu_rpc_check.json").write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
