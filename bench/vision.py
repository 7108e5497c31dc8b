"""A chat with a 512 x 512 image: time to first token cold, with the image cached, and after another image was asked
about in between; decode tok/s after the image; localinfer against llama-server on the same model and projector.

Engines, started once and alive together, each with two slots, the same threads and context: `localinfer`
(`serve MODEL --mmproj P`) and `llama-server` (`-m MODEL --mmproj P -np 2`). Each round, for each engine in an order
that rotates, with images drawn for that round (so no cache holds them): ask about image A (cold), ask the same again
(cached), ask about image B, ask about A again (after another). Every request is greedy, streamed, with a
`--tokens`-token reply (`ignore_eos`). Reported: the median TTFT of each kind with min-max over rounds, the
decode tok/s of the cold request, and localinfer / llama-server per round.

Without `--mmproj`, the test projector (tests/vision_model.py: a random-weight gemma3 projector for SmolLM2, whose
image is 4 tokens) is derived into the results folder: the figures then measure the path of an image (reading,
resizing, encoding, decoding its embeddings) and the cache around it, not a real vision encoder's cost.

Usage: .venv/bin/python bench/vision.py --model PATH.gguf [--mmproj PATH.gguf] [--rounds 5] [--tokens 64]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    REPO_ROOT,
    RESULTS_DIR,
    ManagedServer,
    free_port,
    install_sigterm_handler,
    llama_cpp_bin,
    machine_info,
    stream_openai,
    write_json,
)

KINDS = ("cold", "cached", "after another")


def picture(size: int, seed: int) -> str:
    """A data URI of a ``size`` x ``size`` RGB PNG drawn from ``seed``."""
    row = bytes((x * 7 + seed * 61) % 256 for x in range(size * 3))
    raw = b"".join(b"\x00" + row[y % 3 :] + row[: y % 3] for y in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def test_projector() -> Path:
    sys.path.insert(0, str(REPO_ROOT))
    from tests.vision_model import projector_once

    return projector_once(RESULTS_DIR / "vision")


def start_servers(args: argparse.Namespace, bin_dir: Path, mmproj: Path) -> dict[str, ManagedServer]:
    logs = RESULTS_DIR / "logs"
    common = ["--threads", str(args.threads), "--ctx-size", str(args.ctx * 2), "--parallel", "2"]
    port = free_port()
    ours = [str(REPO_ROOT / ".venv" / "bin" / "localinfer"), "serve", str(args.model), "--port", str(port)]
    servers = {
        "localinfer": ManagedServer(
            "localinfer", [*ours, *common, "--mmproj", str(mmproj)], port, logs / "vision-localinfer.log"
        )
    }
    port = free_port()
    theirs = [str(bin_dir / "llama-server"), "-m", str(args.model), "--host", "127.0.0.1", "--port", str(port)]
    servers["llama-server"] = ManagedServer(
        "llama-server", [*theirs, *common, "--mmproj", str(mmproj)], port, logs / "vision-llama.log"
    )
    for server in servers.values():
        server.start()
    return servers


def ask(client: httpx.Client, url: str, image: str, tokens: int) -> Any:
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Describe this picture."},
                    {"type": "image_url", "image_url": {"url": image}},
                ],
            }
        ],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    return stream_openai(client, url, "/v1/chat/completions", body)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> int:
    install_sigterm_handler()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--mmproj", type=Path, help="the projector (default: the test projector, for SmolLM2)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=2048, help="each slot's context")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--size", type=int, default=512, help="the images' width and height")
    p.add_argument("--llama-cpp-bin", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    bin_dir = llama_cpp_bin(args.llama_cpp_bin)
    mmproj = args.mmproj or test_projector()
    servers = start_servers(args, bin_dir, mmproj)
    names = list(servers)
    ttft: dict[str, dict[str, list[float]]] = {n: {k: [] for k in KINDS} for n in names}
    decode: dict[str, list[float]] = {n: [] for n in names}
    try:
        with httpx.Client(timeout=600.0) as client:
            for round_no in range(args.rounds + 1):  # round 0 warms every engine up and is not counted
                for offset, name in enumerate(names[round_no % 2 :] + names[: round_no % 2]):
                    seed = 1000 * round_no + 10 * offset
                    a, b = picture(args.size, seed), picture(args.size, seed + 1)
                    url = servers[name].base_url
                    cold = ask(client, url, a, args.tokens)
                    cached = ask(client, url, a, args.tokens)
                    ask(client, url, b, args.tokens)
                    after = ask(client, url, a, args.tokens)
                    if round_no:
                        for kind, stats in zip(KINDS, (cold, cached, after), strict=True):
                            ttft[name][kind].append(stats.ttft_s * 1000.0)
                        decode[name].append(cold.decode_tps)
                print(f"round {round_no} done", file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
    rounds = range(args.rounds)
    report: dict[str, Any] = {
        "ttft_ms": {n: {k: spread(v) for k, v in kinds.items()} for n, kinds in ttft.items()},
        "decode_tok_s": {n: spread(v) for n, v in decode.items()},
        "localinfer/llama-server ttft": {
            k: spread([ttft["localinfer"][k][i] / ttft["llama-server"][k][i] for i in rounds]) for k in KINDS
        },
        "localinfer/llama-server decode": spread([decode["localinfer"][i] / decode["llama-server"][i] for i in rounds]),
    }
    payload = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, **report}
    write_json(args.out or RESULTS_DIR / f"vision-{args.model.stem}.json", payload)
    print(render(report, names))
    return 0


def render(report: dict[str, Any], names: list[str]) -> str:
    def cell(s: dict[str, float], digits: int) -> str:
        return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"

    lines = ["| engine | " + " | ".join(f"TTFT {k} ms" for k in KINDS) + " | decode tok/s |", "|---|---|---|---|---|"]
    for name in names:
        cells = [cell(report["ttft_ms"][name][k], 0) for k in KINDS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {cell(report['decode_tok_s'][name], 1)} |")
    ratio = report["localinfer/llama-server ttft"]
    cells = [cell(ratio[k], 2) for k in KINDS]
    lines.append(
        "| localinfer / llama-server | "
        + " | ".join(cells)
        + f" | {cell(report['localinfer/llama-server decode'], 2)} |"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
