"""A model split over llama.cpp RPC workers: `localinfer serve --rpc` with `localinfer rpc` workers against
`llama-server --rpc` with llama.cpp's own worker (`ggml-rpc-server`), on loopback and over a simulated link.

Configurations, per model:

- local: no worker, every layer on this machine's CPU;
- 1 worker: every layer on one worker (`--rpc A`; llama-server `-ngl 99`);
- 1 worker + 1 ms, 1 worker + 5 ms: the same behind bench/delay_proxy.py, which holds every byte for half the round
  trip each way (a LAN, a fast WAN), to show what the network costs per token;
- 2 workers: the layers cut in two halves (`--tensor-split 1,1`), the output on the second.

Each server has workers of its own (a worker serves one client at a time), with the same threads. The servers of a
group (local; the three 1-worker links; 2 workers) run at once and are asked in turn, request by request, the order
rotating every round; round 0 is a warm-up that is not counted. A round's prompt is fresh (sentences in a random
order with random numbers, so no cached run of tokens helps), about `--prompt-words` words, the same for every
server; the reply is greedy and exactly `--tokens` tokens (ignore_eos). Decode tok/s = tokens after the first over
the time from the first to the last streamed token; prompt tok/s = prompt tokens over the time to the first token.
Reported: the median and min-max over rounds of each figure, of the ratio localinfer / llama-server taken round by
round, and of the milliseconds a link adds to each decoded token against the same engine on plain loopback in the
same round; and in how many rounds the two engines wrote the same greedy text. localinfer computes as llama-server
does: `--spec off` (llama-server does not speculate by default) and `--no-last-token-alone` (a cold prompt's last
token in the prompt's batch, not alone: docs/serving.md, greedy text cold and cached).

One thread per server and per worker by default: on a machine of two cores shared with other work, two threads each
(four spinning at once when a worker and its server both compute) made llama.cpp's thread barriers stall for tens of
milliseconds a token, in llama-server as in localinfer.

Usage: .venv/bin/python bench/rpc.py --home ~/.cache/localinfer/test-home \
       [--models smollm2,gemma3-270m-q4-k-m] [--rounds 8] [--tokens 64]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    BENCH_DIR,
    HOST,
    RESULTS_DIR,
    BenchError,
    ManagedServer,
    free_port,
    greedy_body,
    install_sigterm_handler,
    llama_cpp_bin,
    machine_info,
    stream_completion,
    write_json,
)

ENGINES = ("localinfer", "llama-server")
PROMPT = (
    "The history of computing is a story of machines that became smaller, faster and cheaper. Vacuum tubes gave "
    "way to transistors, transistors to integrated circuits, and those to microprocessors that put a whole "
    "computer on one chip. Memory followed the same curve, from mercury delay lines and magnetic drums to core, "
    "then to dynamic RAM. Storage went from punched cards and tape to disks and flash. "
)


@dataclass(frozen=True)
class Group:
    """Servers alive together and alternated request by request: each engine over ``workers`` workers, once per
    added round trip in ``rtts_ms`` (0: plain loopback)."""

    name: str
    workers: int
    rtts_ms: tuple[float, ...]


GROUPS = {
    g.name: g for g in (Group("local", 0, (0.0,)), Group("1 worker", 1, (0.0, 1.0, 5.0)), Group("2 workers", 2, (0.0,)))
}


def config_name(group: Group, rtt_ms: float) -> str:
    return group.name + (f" + {rtt_ms:g} ms" if rtt_ms else "")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--home", type=Path, required=True, help="a localinfer home holding the models")
    p.add_argument("--models", default="smollm2,gemma3-270m-q4-k-m", help="model names, comma-separated")
    p.add_argument("--groups", default=",".join(GROUPS), help="comma-separated subset of: " + ", ".join(GROUPS))
    p.add_argument("--rounds", type=int, default=8, help="measured rounds per configuration (default 8)")
    p.add_argument("--tokens", type=int, default=64, help="tokens generated per request (default 64)")
    p.add_argument("--prompt-words", type=int, default=150, help="about how long each prompt is (default 150)")
    p.add_argument("--threads", type=int, default=1, help="threads of every server and worker (default 1)")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--llama-cpp-bin", type=Path, help="folder with llama-server and ggml-rpc-server (default: built)")
    p.add_argument(
        "--hide-gpu-from-servers",
        action="store_true",
        help="start the servers with CUDA_VISIBLE_DEVICES='' so that, on one machine with a GPU, the layers go to "
        "the workers' GPU (each worker lends its GPUs by default) and none to the server's own",
    )
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "rpc.json")
    args = p.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    names = [g.strip() for g in args.groups.split(",") if g.strip()]
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        p.error(f"--groups: no group {', '.join(unknown)} (choose among: {', '.join(GROUPS)})")
    args.groups = [GROUPS[name] for name in names]
    return args


def model_path(home: Path, name: str) -> Path:
    """The GGUF file of ``name`` in the localinfer home (its manifest's one file)."""
    manifest = home / "models" / "manifests" / f"{name}.json"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError) as exc:
        raise BenchError(f"no model {name} in {home} ({exc}): pull it, or run its tests once") from exc
    return home / "models" / str(files[0]["path"])


class Process:
    """A worker or proxy child process, ready once its port takes connections; stopped with SIGTERM."""

    def __init__(self, name: str, cmd: list[str], port: int, log: Path) -> None:
        self.name, self.cmd, self.port, self.log = name, cmd, port, log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise BenchError(
                    f"{name} exited with {self.proc.returncode}: {log.read_text(errors='replace')[-2000:]}"
                )
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise BenchError(f"{name} did not listen on {port} within 120 s") from None
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=0.1)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait()


def _rpc(sock: socket.socket, command: int, payload: bytes) -> bytes:
    """One RPC command and its answer (llama.cpp's framing: command byte, payload size, payload; size, answer)."""
    sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
    data = b""
    while len(data) < 8 or len(data) < 8 + struct.unpack("<Q", data[:8])[0]:
        chunk = sock.recv(4096)
        if not chunk:
            raise BenchError("the worker closed the connection")
        data += chunk
    return data[8:]


def round_trip_ms(port: int, tries: int = 20) -> float:
    """The median time of one request and its answer (DEVICE_COUNT, after the handshake, on one connection) to
    the worker behind ``port``: the link's round trip plus the worker's answer."""
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _rpc(sock, 14, bytes(24))  # HELLO
        times = []
        for _ in range(tries):
            started = time.perf_counter()
            _rpc(sock, 15, b"")  # DEVICE_COUNT
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


@contextlib.contextmanager
def workers_for(
    engine: str, workers: int, rtt_ms: float, args: argparse.Namespace, bin_dir: Path, logs: Path
) -> Iterator[list[str]]:
    """``workers`` workers of ``engine``'s kind (behind delay proxies adding ``rtt_ms`` when it is not 0); the
    addresses its server dials."""
    started: list[Process] = []
    try:
        endpoints = []
        for i in range(workers):
            port = free_port()
            if engine == "localinfer":
                cmd = [
                    sys.executable,
                    "-m",
                    "localinfer.app.cli",
                    "rpc",
                    "--port",
                    str(port),
                    "--threads",
                    str(args.threads),
                ]
            else:
                cmd = [str(bin_dir / "ggml-rpc-server"), "-p", str(port), "-t", str(args.threads)]
            tag = f"{engine}-{rtt_ms:g}ms"
            started.append(Process(f"{tag} worker {i}", cmd, port, logs / f"{tag}-worker-{i}.log"))
            if rtt_ms:
                front = free_port()
                proxy = [sys.executable, str(BENCH_DIR / "delay_proxy.py"), "--listen", str(front)]
                proxy += ["--to", f"{HOST}:{port}", "--rtt-ms", str(rtt_ms)]
                started.append(Process(f"{tag} proxy {i}", proxy, front, logs / f"{tag}-proxy-{i}.log"))
                port = front
            endpoints.append(f"{HOST}:{port}")
        yield endpoints
    finally:
        for process in reversed(started):
            process.stop()


def server_command(
    engine: str, model: str, path: Path, endpoints: list[str], port: int, args: argparse.Namespace
) -> list[str]:
    common_rpc: list[str] = []
    if endpoints:
        common_rpc = ["--rpc", ",".join(endpoints)]
        if len(endpoints) > 1:
            common_rpc += ["--tensor-split", ",".join("1" for _ in endpoints)]
    if engine == "localinfer":
        cmd = [sys.executable, "-m", "localinfer.app.cli", "serve", model, "--host", HOST, "--port", str(port)]
        cmd += ["--threads", str(args.threads), "--ctx-size", str(args.ctx), "--parallel", "1", "--spec", "off"]
        cmd += ["--no-last-token-alone"]
        cmd += common_rpc
    else:
        cmd = [str(args.bin_dir / "llama-server"), "-m", str(path), "--host", HOST, "--port", str(port)]
        cmd += ["-t", str(args.threads), "-c", str(args.ctx), "-np", "1", "-fit", "off"]
        cmd += common_rpc + (["-ngl", "99"] if endpoints else [])
    # env replaces itself with the server (one process, the same pid), its GPUs hidden
    return ["env", "CUDA_VISIBLE_DEVICES=", *cmd] if args.hide_gpu_from_servers else cmd


def prompt(words: int, rng: random.Random) -> str:
    """About ``words`` words of the text's sentences in a random order, each with a random number in it: no run of
    tokens comes back from an earlier prompt, so neither a prefix cache nor localinfer's reuse by shifting helps."""
    sentences = [s.strip() + "." for s in PROMPT.split(".") if s.strip()]
    parts: list[str] = []
    while sum(len(p.split()) for p in parts) < words:
        parts.append(f"{rng.randrange(10**6)}: {rng.choice(sentences)}")
    return " ".join(parts)


def run_group(model: str, path: Path, group: Group, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every variant of ``group`` (engine x added round trip) started at once and asked in turn, round by round;
    per configuration (one added round trip): each engine's figures, the ratio localinfer / llama-server per
    round, and the milliseconds per token the added round trip costs each engine against none, per round."""
    logs = RESULTS_DIR / "logs" / "rpc" / f"{model}-{group.name.replace(' ', '-')}"
    variants = [(engine, rtt) for rtt in group.rtts_ms for engine in ENGINES]
    samples: dict[tuple[str, float], dict[str, list[float]]] = {v: {"decode": [], "prompt": []} for v in variants}
    same_text = {rtt: 0 for rtt in group.rtts_ms}  # measured rounds where both engines wrote the same greedy text
    commands: dict[tuple[str, float], list[str]] = {}
    handshake: dict[tuple[str, float], float] = {}
    with contextlib.ExitStack() as stack:
        servers: dict[tuple[str, float], ManagedServer] = {}
        for engine, rtt in variants:
            endpoints = stack.enter_context(workers_for(engine, group.workers, rtt, args, args.bin_dir, logs))
            if rtt:
                handshake[engine, rtt] = round_trip_ms(int(endpoints[0].rpartition(":")[2]))
            port = free_port()
            commands[engine, rtt] = server_command(engine, model, path, endpoints, port, args)
            print(f"[{model} / {config_name(group, rtt)}] {' '.join(commands[engine, rtt])}", file=sys.stderr)
            log = logs / f"{engine}-{rtt:g}ms.log"
            servers[engine, rtt] = stack.enter_context(ManagedServer(engine, commands[engine, rtt], port, log))
        ids = {v: server.model_id(model) for v, server in servers.items()}
        rng = random.Random(secrets.randbits(64))
        with httpx.Client(timeout=600.0) as client:
            for round_no in range(args.rounds + 1):  # round 0 warms every server up and is not counted
                shift = round_no % len(variants)
                order = variants[shift:] + variants[:shift]
                if round_no % 2:
                    order.reverse()
                text = prompt(args.prompt_words, rng)  # the same for every server in a round
                written: dict[tuple[str, float], str] = {}
                for variant in order:
                    body = greedy_body(ids[variant], args.tokens, prompt=text)
                    stats = stream_completion(client, servers[variant].base_url, body)
                    if stats.tokens != args.tokens:
                        raise BenchError(f"{variant} gave {stats.tokens} tokens, not {args.tokens}")
                    written[variant] = stats.text
                    if round_no:
                        samples[variant]["decode"].append(stats.decode_tps)
                        samples[variant]["prompt"].append((stats.prompt_tokens or 0) / stats.ttft_s)
                if round_no:
                    for rtt in group.rtts_ms:
                        same_text[rtt] += written["localinfer", rtt] == written["llama-server", rtt]
    results: dict[str, dict[str, Any]] = {}
    for rtt in group.rtts_ms:
        result: dict[str, Any] = {
            "commands": {e: commands[e, rtt] for e in ENGINES},
            "handshake_rtt_ms": {e: handshake[e, rtt] for e in ENGINES} if rtt else None,
            "samples": {e: samples[e, rtt] for e in ENGINES},
            "rounds_with_the_same_text": f"{same_text[rtt]} of {args.rounds}",
        }
        for kind in ("decode", "prompt"):
            ours, theirs = samples["localinfer", rtt][kind], samples["llama-server", rtt][kind]
            result[kind] = {e: spread(samples[e, rtt][kind]) for e in ENGINES}
            result[kind]["ratio"] = spread([a / b for a, b in zip(ours, theirs, strict=True)])
        if rtt:
            result["ms_added_per_token"] = {
                e: spread(
                    [
                        1000 / slow - 1000 / fast
                        for slow, fast in zip(samples[e, rtt]["decode"], samples[e, 0.0]["decode"], strict=True)
                    ]
                )
                for e in ENGINES
            }
        results[config_name(group, rtt)] = result
    return results


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def render(report: dict[str, Any]) -> str:
    lines = [
        "| model | configuration | decode tok/s localinfer | llama-server | ratio (min-max) "
        "| prompt tok/s localinfer | llama-server | ratio (min-max) | same greedy text |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, results in report["models"].items():
        for name, res in results.items():
            cells = []
            for kind in ("decode", "prompt"):
                r = res[kind]
                ratio = r["ratio"]
                cells += [
                    f"{r['localinfer']['median']:.1f}",
                    f"{r['llama-server']['median']:.1f}",
                    f"{ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})",
                ]
            cells.append(res.get("rounds_with_the_same_text", "-"))
            lines.append(f"| {model} | {name} | " + " | ".join(cells) + " |")
    costs = [(m, n, r) for m, results in report["models"].items() for n, r in results.items() if r["handshake_rtt_ms"]]
    if costs:
        lines += [
            "",
            "| model | link | measured round trip ms | ms added per token: localinfer (min-max) | llama-server |",
            "|---|---|---:|---:|---:|",
        ]
        for model, name, res in costs:
            cells = [
                f"{res['ms_added_per_token'][e]['median']:.1f} ({res['ms_added_per_token'][e]['min']:.1f}-"
                f"{res['ms_added_per_token'][e]['max']:.1f})"
                for e in ENGINES
            ]
            rtt = res["handshake_rtt_ms"]["localinfer"]
            lines.append(f"| {model} | {name} | {rtt:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    install_sigterm_handler()
    args = parse_args()
    args.bin_dir = llama_cpp_bin(args.llama_cpp_bin, ("llama-server", "ggml-rpc-server"))
    os.environ["LOCALINFER_HOME"] = str(args.home)
    started = time.monotonic()
    load_before = os.getloadavg()
    report: dict[str, Any] = {"models": {}}
    for model in args.models:
        path = model_path(args.home, model)
        report["models"][model] = {}
        for group in args.groups:
            report["models"][model].update(run_group(model, path, group, args))
            write_json(args.out.with_suffix(".partial.json"), report)  # what is done so far, if a later step fails
            print(f"[{model} / {group.name}] done at {time.monotonic() - started:.0f} s", file=sys.stderr)
    payload = {
        "benchmark": "rpc",
        "machine": machine_info(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "llama_cpp_build": (args.bin_dir / "BUILD-INFO").read_text(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "seconds": time.monotonic() - started,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **report,
    }
    write_json(args.out, payload)
    args.out.with_suffix(".partial.json").unlink(missing_ok=True)
    print(render(report))
    print(f"\n{payload['seconds']:.0f} s; load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
