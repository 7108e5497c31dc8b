"""What localinfer's relay to an engine process (the vLLM path) costs: decode tok/s and time to first token of the
same engine asked directly and through `localinfer serve`'s relay.

vLLM needs a datacenter GPU, so the engine here is llama.cpp's llama-server, started the way localinfer starts
`vllm serve` (its VllmBackend: a child on a free port of 127.0.0.1, a generated key in the environment, the
model's name given as `--served-model-name`, which a two-line shim turns into llama-server's `--alias`). A second
llama-server with the same flags is asked directly. Each run streams one `/v1/completions` request of
`--max-tokens` greedy tokens to each, alternately, after a warm-up; medians are reported, and their ratios.

Usage: .venv/bin/python bench/relay.py --model PATH.gguf [--threads 2] [--runs 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    HOST,
    RESULTS_DIR,
    ManagedServer,
    StreamStats,
    free_port,
    greedy_body,
    install_sigterm_handler,
    llama_cpp_bin,
    machine_info,
    stream_completion,
    write_json,
)

MODEL_NAME = "relayed"
# Runs in place of `vllm serve`: llama-server takes --alias where vLLM takes --served-model-name.
SHIM = """import os, sys
args = ["--alias" if a == "--served-model-name" else a for a in sys.argv[1:]]
at = args.index("--model")  # the folder vLLM would serve: llama-server serves its -m GGUF instead
os.execv(args[0], args[:at] + args[at + 2 :])
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="GGUF file the engine serves")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="compute threads (default: all)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per request (default 128)")
    ap.add_argument("--runs", type=int, default=5, help="measured requests per path; medians reported")
    ap.add_argument("--llama-cpp-bin", type=Path, help="folder with llama-server (default: bench/build-llama-cpp's)")
    ap.add_argument("--serve-relay", nargs=3, metavar=("PORT", "WORKDIR", "ENGINE_JSON"), help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def engine_argv(server: Path, args: argparse.Namespace) -> list[str]:
    return [str(server), "-m", str(args.model), "-t", str(args.threads), "-c", "2048", "-np", "1"]


def serve_relay(port: int, workdir: Path, engine: list[str]) -> None:
    """The child: `localinfer serve`'s app over an engine whose one model, a Hugging Face folder, is served by
    VllmBackend running ``engine`` (through the shim)."""
    import uvicorn

    from localinfer.app.server.app import create_app
    from localinfer.backends.engine_process.engines import VllmBackend
    from localinfer.backends.engine_process.recipes.vllm import VLLM
    from localinfer.config import Settings
    from localinfer.engine.engine import Engine
    from localinfer.models.store import ModelStore, hf_manifest

    folder = workdir / "hf-model"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    header = b'{"__metadata__":{}}'
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    shim = workdir / "shim.py"
    shim.write_text(SHIM)
    settings = Settings(home=workdir / "home", discover=False)
    store = ModelStore(settings.models_dir)
    manifest = hf_manifest(folder, name=MODEL_NAME)

    def backend() -> VllmBackend:
        command = [sys.executable, str(shim), *engine]
        recipe = dataclasses.replace(VLLM, command=lambda: command, key_env="LLAMA_API_KEY")
        return VllmBackend(recipe=recipe)

    engine_ = Engine(settings, store, {"hf": backend})
    app = create_app(engine_, preload=manifest)
    store.register(manifest)
    uvicorn.run(app, host=HOST, port=port, log_level="warning", access_log=False)


def measure(client: httpx.Client, url: str, model: str, args: argparse.Namespace, run: int) -> StreamStats:
    prompt = f"Run {run} ({secrets.token_hex(4)}): write a long story about a lighthouse keeper."
    return stream_completion(client, url, greedy_body(model, args.max_tokens, prompt=prompt))


def summary(stats: list[StreamStats]) -> dict[str, Any]:
    return {
        "decode_tps": statistics.median(s.decode_tps for s in stats),
        "ttft_ms": statistics.median(s.ttft_s for s in stats) * 1000,
        "tokens": [s.tokens for s in stats],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_relay:
        port, workdir, engine = args.serve_relay
        serve_relay(int(port), Path(workdir), json.loads(engine))
        return 0
    install_sigterm_handler()
    server = llama_cpp_bin(args.llama_cpp_bin) / "llama-server"
    logs = RESULTS_DIR / "logs"
    workdir = RESULTS_DIR / "relay-work"
    direct_port, relay_port = free_port(), free_port()
    direct_cmd = [*engine_argv(server, args), "--host", HOST, "--port", str(direct_port), "--alias", MODEL_NAME]
    relay_cmd = [
        sys.executable,
        __file__,
        "--model",
        str(args.model),
        "--serve-relay",
        str(relay_port),
        str(workdir),
        json.dumps(engine_argv(server, args)),
    ]
    results: dict[str, list[StreamStats]] = {"direct": [], "relayed": []}
    with (
        ManagedServer("llama-server", direct_cmd, direct_port, logs / "relay-direct.log") as direct,
        ManagedServer("localinfer relay", relay_cmd, relay_port, logs / "relay-localinfer.log") as relay,
        httpx.Client() as client,
    ):
        urls = {"direct": direct.base_url, "relayed": relay.base_url}
        for url in urls.values():
            measure(client, url, MODEL_NAME, args, -1)  # warm-up
        for run in range(args.runs):
            for name, url in urls.items():
                results[name].append(measure(client, url, MODEL_NAME, args, run))
    direct_s, relayed_s = summary(results["direct"]), summary(results["relayed"])
    report = {
        "machine": machine_info(),
        "model": str(args.model),
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "runs": args.runs,
        "direct": direct_s,
        "relayed": relayed_s,
        "decode_ratio": relayed_s["decode_tps"] / direct_s["decode_tps"],
        "ttft_added_ms": relayed_s["ttft_ms"] - direct_s["ttft_ms"],
    }
    write_json(RESULTS_DIR / f"relay-{args.model.stem}.json", report)
    print("| path | decode tok/s | TTFT ms |\n|---|---:|---:|")
    for name, s in (("llama-server, directly", direct_s), ("through localinfer's relay", relayed_s)):
        print(f"| {name} | {s['decode_tps']:.1f} | {s['ttft_ms']:.0f} |")
    print(f"relayed/direct decode: {report['decode_ratio']:.3f}; TTFT added: {report['ttft_added_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
