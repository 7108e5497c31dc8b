"""Greedy text cold and cached (issue #42): how often each engine writes the same text for a prompt computed whole
(``cache_prompt`` false) and for the same prompt again with all but its last token cached, over the fifty prompts of
tests/greedy_corpus.py, and what computing a cold prompt's last token in a step of its own costs.

Three servers in turn, each with one slot (``-c 2560 -np 1``, as the test): localinfer with its defaults
(``--last-token-alone``), localinfer with ``--no-last-token-alone``, and llama-server from bench/build-llama-cpp.
localinfer runs with ``--spec off`` unless ``--spec`` says otherwise.

- agreement: for each server, the prompts whose cold and cached texts are the same (``--tokens`` greedy tokens),
  and for both localinfer settings, the prompts whose texts are llama-server's, cold and cached; and the prompts
  drafted alike cold and cached (the same ``draft_n`` and ``draft_n_accepted``; with ``--defaults`` and ``--spec
  ngram`` they can differ).
- cost: the server's own ``timings.prompt_ms`` of each cold request, in ``--rounds`` rounds that alternate the two
  localinfer servers (both up at once: each round sends every prompt to one, then the other); the medians of the
  short prompts (under 100 tokens) and the long ones (1,000 or more), and their difference.

With ``--defaults``, localinfer with its defaults (prompt lookup on) answers the corpus too, for agreement only.

Usage: python bench/greedy_cache.py [--model PATH.gguf] [--tokens 8] [--rounds 3] [--spec off] [--every N]
           [--defaults] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

from benchlib import REPO_ROOT, ManagedServer, free_port, llama_cpp_bin, machine_info, write_json

sys.path.insert(0, str(REPO_ROOT))
from tests.greedy_corpus import Prompt, corpus

SLOT = ["-c", "2560", "-np", "1"]


def ask(url: str, prompt: Prompt, tokens: int, cache_prompt: bool) -> dict[str, Any]:
    """The text, the prompt's token count and its prompt_ms, through /v1/chat/completions or /completion."""
    if prompt.kind == "chat":
        body = {"messages": prompt.chat_messages(), "max_tokens": tokens, "temperature": 0}
        answer = httpx.post(f"{url}/v1/chat/completions", json={**body, "cache_prompt": cache_prompt}, timeout=600)
        answer.raise_for_status()
        data = answer.json()
        text = data["choices"][0]["message"]["content"]
    else:
        body = {"prompt": prompt.text, "n_predict": tokens, "temperature": 0, "cache_prompt": cache_prompt}
        answer = httpx.post(f"{url}/completion", json=body, timeout=600)
        answer.raise_for_status()
        data = answer.json()
        text = data["content"]
    timings = data["timings"]
    n = timings["prompt_n"] + timings.get("cache_n", 0)  # (localinfer leaves out a cache_n of 0)
    drafts = [timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)]
    return {"text": text, "n": n, "prompt_ms": timings["prompt_ms"], "drafts": drafts}


def pairs(url: str, prompts: list[Prompt], tokens: int) -> list[dict[str, Any]]:
    out = []
    for prompt in prompts:
        cold = ask(url, prompt, tokens, cache_prompt=False)
        cached = ask(url, prompt, tokens, cache_prompt=True)
        out.append(
            {
                "n": cold["n"],
                "cold": cold["text"],
                "cached": cached["text"],
                "prompt_ms": cold["prompt_ms"],
                "drafts": [cold["drafts"], cached["drafts"]],
            }
        )
    return out


def localinfer_cmd(model: Path, port: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "localinfer.app.cli", "serve", str(model), "--port", str(port), *SLOT, *flags]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="a GGUF (default: the tests' SmolLM2)")
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--spec", default="off", help="localinfer's --spec (default off)")
    p.add_argument("--every", type=int, default=1, help="every N-th prompt of the corpus only (default 1: all 50)")
    p.add_argument("--defaults", action="store_true", help="also localinfer with its defaults (agreement only)")
    p.add_argument("--llama-cpp-bin", type=Path)
    p.add_argument("--out", type=Path, default=Path("/tmp/greedy-cache.json"))
    args = p.parse_args()
    model = args.model or next(Path.home().glob(".cache/localinfer/test-home/models/blobs/sha256-b179c95*"))
    prompts = corpus()[:: args.every]
    logs = args.out.parent / "greedy-cache-logs"
    bin_dir = llama_cpp_bin(args.llama_cpp_bin, ("llama-server",))
    found: dict[str, list[dict[str, Any]]] = {}
    port = free_port()
    llama = [str(bin_dir / "llama-server"), "-m", str(model), "--port", str(port), *SLOT]
    with ManagedServer("llama-server", llama, port, logs / "llama-server.log") as server:
        found["llama-server"] = pairs(server.base_url, prompts, args.tokens)
    write_json(args.out.with_suffix(".partial.json"), {"found": found})  # what a long run has so far
    settings = {"alone": ["--spec", args.spec], "with-the-rest": ["--spec", args.spec, "--no-last-token-alone"]}
    costs: dict[str, list[list[float]]] = {name: [] for name in settings}
    ports = {name: free_port() for name in settings}
    servers = {
        name: ManagedServer(name, localinfer_cmd(model, ports[name], *flags), ports[name], logs / f"{name}.log")
        for name, flags in settings.items()
    }
    if args.defaults:
        port = free_port()
        with ManagedServer("defaults", localinfer_cmd(model, port), port, logs / "defaults.log") as server:
            found["defaults"] = pairs(server.base_url, prompts, args.tokens)
    try:
        for server in servers.values():
            server.start()
        for r in range(args.rounds):
            for name in list(settings) if r % 2 == 0 else list(settings)[::-1]:
                answers = pairs(servers[name].base_url, prompts, args.tokens)
                found.setdefault(name, answers)
                write_json(args.out.with_suffix(".partial.json"), {"found": found, "prompt_ms": costs})
                costs[name].append([a["prompt_ms"] for a in answers])
    finally:
        for server in servers.values():
            server.stop()
    report: dict[str, Any] = {"machine": machine_info(), "args": sys.argv[1:], "agreement": {}, "cost": {}}
    theirs = found["llama-server"]
    for name, answers in found.items():
        same = sum(a["cold"] == a["cached"] for a in answers)
        agree = sum((a["cold"], a["cached"]) == (t["cold"], t["cached"]) for a, t in zip(answers, theirs, strict=True))
        drafted_alike = sum(a["drafts"][0] == a["drafts"][1] for a in answers)  # draft_n, draft_n_accepted
        report["agreement"][name] = {
            "cold_is_cached": same,
            "as_llama_server": agree,
            "drafted_alike": drafted_alike,
            "of": len(answers),
        }
        print(
            f"{name}: cold = cached for {same}/{len(answers)}, llama-server's text for {agree}, "
            f"drafted alike cold and cached for {drafted_alike}",
            file=sys.stderr,
        )
    sizes = [a["n"] for a in theirs]
    for label, low, high in (("short (<100 tokens)", 0, 100), ("long (>=1000 tokens)", 1000, 10**9)):
        picked = [i for i, n in enumerate(sizes) if low <= n < high]
        medians = {name: statistics.median(rnd[i] for rnd in rounds for i in picked) for name, rounds in costs.items()}
        report["cost"][label] = {"prompts": len(picked), "median_prompt_ms": medians}
        extra = medians["alone"] - medians["with-the-rest"]
        print(f"{label}, {len(picked)} prompts: prompt_ms {medians} (+{extra:.1f} ms)", file=sys.stderr)
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
