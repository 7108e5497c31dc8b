"""Output of bench/concurrency.py: the JSON file, the Markdown tables and target ratios, and the PNG plot."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from benchlib import REPO_ROOT, RESULTS_DIR, machine_info, write_json

NOTES = (
    "localinfer gets `--parallel N --ctx-size C`: each of its N slots has a KV cache of C tokens.",
    "llama-server gets `-np N -c C*N`: it splits -c across its slots, so each slot has C tokens like a localinfer "
    "slot, and the two KV caches are the same size.",
    "llama-cpp-python's server has one context of C tokens and serves one request at a time: concurrent clients "
    "queue (`--interrupt_requests False`, so a new request does not cut off the streaming one). It has no "
    "`ignore_eos`; it gets a logit bias of -1000 on every end-of-generation token instead (what llama-server's "
    "`ignore_eos` does).",
    "aggregate tok/s = generated tokens of a round / wall time of the round (first request sent to last stream "
    "ended), over all measured rounds; TTFT and end-to-end latency are per request, on the client.",
    "peak RSS = highest sum of RSS over the server process and its children, sampled every 50 ms from ready to stop "
    "(mapped model pages count once touched).",
)


def _get(results: dict[str, dict[str, Any]], engine: str, level: int, key: str) -> float | None:
    value = results.get(engine, {}).get(str(level), {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compute_ratios(
    levels: list[int], throughput: dict[str, dict[str, dict[str, Any]]], multiturn: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    li, ls, lcp = "localinfer", "llama-server", "llama-cpp-python"
    rss_diff = {}
    for lv in levels:
        a, b = _get(throughput, li, lv, "rss_peak_mib"), _get(throughput, ls, lv, "rss_peak_mib")
        rss_diff[str(lv)] = a - b if a is not None and b is not None else None
    mt = multiturn.get(li, {}).get("ratio_10_1")
    return {
        "localinfer_vs_llama_server_tok_s": {
            str(lv): _ratio(_get(throughput, li, lv, "agg_tok_s"), _get(throughput, ls, lv, "agg_tok_s"))
            for lv in levels
        },
        "localinfer_vs_llama_cpp_python_tok_s": {
            str(lv): _ratio(_get(throughput, li, lv, "agg_tok_s"), _get(throughput, lcp, lv, "agg_tok_s"))
            for lv in levels
        },
        "ttft_p50_ms_4_streams": {
            "localinfer": _get(throughput, li, 4, "ttft_ms_p50"),
            "llama-server": _get(throughput, ls, 4, "ttft_ms_p50"),
            "ratio": _ratio(_get(throughput, li, 4, "ttft_ms_p50"), _get(throughput, ls, 4, "ttft_ms_p50")),
        },
        "multiturn_turn10_over_turn1": {
            engine: res.get("ratio_10_1") for engine, res in multiturn.items() if "ratio_10_1" in res
        },
        "localinfer_multiturn_turn10_over_turn1": float(mt) if isinstance(mt, (int, float)) else None,
        "peak_rss_localinfer_minus_llama_server_mib": rss_diff,
    }


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def throughput_table(levels: list[int], throughput: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| engine | streams | slots | aggregate tok/s | per-stream tok/s | TTFT p50 ms | TTFT p95 ms "
        "| e2e p50 ms | e2e p95 ms | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for engine, per_level in throughput.items():
        for lv in levels:
            res = per_level.get(str(lv), {})
            if "agg_tok_s" not in res:
                lines.append(f"| {engine} | {lv} | | {res.get('error') or res.get('skipped') or '-'} | | | | | | |")
                continue
            lines.append(
                f"| {engine} | {lv} | {res['slots']} | {res['agg_tok_s']:.1f} | {res['stream_decode_tps_median']:.1f}"
                f" | {res['ttft_ms_p50']:.0f} | {res['ttft_ms_p95']:.0f} | {res['e2e_ms_p50']:.0f}"
                f" | {res['e2e_ms_p95']:.0f} | {res['rss_peak_mib']:.0f} |"
            )
    return "\n".join(lines)


def multiturn_table(multiturn: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| engine | turn-1 TTFT ms | turn-10 TTFT ms | turn 10 / turn 1 | turn-10 prompt tokens | turn-10 cached |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for engine, res in multiturn.items():
        if "turns" not in res:
            lines.append(f"| {engine} | {res.get('error') or res.get('skipped') or '-'} | | | | |")
            continue
        last = res["turns"][-1]
        lines.append(
            f"| {engine} | {res['turn1_ttft_ms']:.0f} | {res['turn10_ttft_ms']:.0f} | {res['ratio_10_1']:.2f}"
            f" | {last['prompt_tokens'] if last['prompt_tokens'] is not None else '-'}"
            f" | {last['cached_tokens'] if last['cached_tokens'] is not None else '-'} |"
        )
    return "\n".join(lines)


def ratio_lines(levels: list[int], ratios: dict[str, Any]) -> list[str]:
    vs_ls = ratios["localinfer_vs_llama_server_tok_s"]
    vs_lcp = ratios["localinfer_vs_llama_cpp_python_tok_s"]
    ttft = ratios["ttft_p50_ms_4_streams"]
    rss = ratios["peak_rss_localinfer_minus_llama_server_mib"]
    mt = ratios["multiturn_turn10_over_turn1"]
    return [
        "- localinfer / llama-server aggregate tok/s: "
        + ", ".join(f"{lv} stream{'s' if lv > 1 else ''} {_fmt(vs_ls[str(lv)])}" for lv in levels),
        f"- localinfer / llama-cpp-python aggregate tok/s at 4 streams: {_fmt(vs_lcp.get('4'))}"
        + " (all levels: "
        + ", ".join(f"{lv}: {_fmt(vs_lcp[str(lv)])}" for lv in levels)
        + ")",
        f"- TTFT p50 at 4 streams: localinfer {_fmt(ttft['localinfer'], '.0f')} ms vs llama-server "
        f"{_fmt(ttft['llama-server'], '.0f')} ms (ratio {_fmt(ttft['ratio'])})",
        f"- multi-turn TTFT turn 10 / turn 1, localinfer: {_fmt(ratios['localinfer_multiturn_turn10_over_turn1'])}"
        + (" (" + ", ".join(f"{e}: {_fmt(v)}" for e, v in mt.items()) + ")" if mt else ""),
        "- peak RSS localinfer - llama-server, MiB: "
        + ", ".join(f"{lv} stream{'s' if lv > 1 else ''} {_fmt(rss[str(lv)], '+.0f')}" for lv in levels),
    ]


def plot(path: Path, title: str, levels: list[int], throughput: dict[str, dict[str, dict[str, Any]]]) -> bool:
    """Aggregate tok/s against concurrent streams, one line per engine. False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (LOCALINFER_EXTRAS=dev,bench scripts/setup): no plot", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for engine, per_level in throughput.items():
        points = [(lv, per_level[str(lv)]["agg_tok_s"]) for lv in levels if "agg_tok_s" in per_level.get(str(lv), {})]
        if points:
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=engine)
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("aggregate generated tok/s")
    ax.set_xticks(levels)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=10)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def write_outputs(
    args: argparse.Namespace,
    *,
    throughput: dict[str, dict[str, dict[str, Any]]],
    multiturn: dict[str, dict[str, Any]],
    llama_cpp_bin: Path | None,
    llama_cpp_build: str | None,
    load_before: tuple[float, float, float],
) -> None:
    """Write the JSON and the plot, print the tables and the target ratios on stdout."""
    levels: list[int] = args.levels
    ratios = compute_ratios(levels, throughput, multiturn)
    out: Path = args.out or RESULTS_DIR / f"concurrency-{args.model.stem}.json"
    png = out.with_suffix(".png")
    payload = {
        "benchmark": "concurrency",
        "model": str(args.model.resolve()),
        "model_label": args.label,
        "model_bytes": args.model.stat().st_size,
        "threads": args.threads,
        "levels": levels,
        "parallel": args.parallel,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "warmup_rounds": 1,
        "ctx": args.ctx,
        "chat_max_tokens": args.chat_max_tokens,
        "engines": args.engines,
        "llama_cpp_bin": str(llama_cpp_bin) if llama_cpp_bin else None,
        "llama_cpp_build": llama_cpp_build,
        "machine": machine_info(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "notes": list(NOTES),
        "ratios": ratios,
        "throughput": throughput,
        "multiturn": multiturn,
    }
    write_json(out, payload)
    title = f"{args.label or args.model.name}, {args.threads} threads, {args.max_tokens} tokens/request"
    plotted = plot(png, title, levels, throughput)

    print(f"\n### concurrent streams, {title}, ctx {args.ctx}, {args.rounds} rounds + 1 warm-up\n")
    print(throughput_table(levels, throughput))
    if multiturn:
        print(f"\n### multi-turn chat, 10 turns, {args.chat_max_tokens} reply tokens each\n")
        print(multiturn_table(multiturn))
    print("\n### target ratios\n")
    print("\n".join(ratio_lines(levels, ratios)))
    print("\nnotes:\n" + "\n".join(f"- {note}" for note in NOTES))
    if load_before[0] > 0.5:
        print(
            f"\nnote: 1-min load average {load_before[0]:.1f} when this run started (other work, or a run just"
            " before): figures may be low"
        )
    print(f"\nJSON: {_rel(out)}" + (f"\nplot: {_rel(png)}" if plotted else ""))
