"""A plot of bench/gpu_compare.py's results: localinfer's speed over llama-server's for each model and figure (1, 16
and 64 streams, prefill of 2,048 and 8,192 tokens), a bar at the ratio of the medians, and a line from localinfer's
slowest to its fastest round over llama-server's median; the issue's targets (1.0x, and 1.3x for many streams) drawn
across. Inputs are gpu_compare.py's results files (``--out``) or the ``partial.json`` a run cut short leaves, in any
number: the models are drawn in the order they come.

Usage: python bench/gpu_compare_plot.py RESULTS.json [MORE.json ...] --out docs/img/gpu-compare.png [--title TEXT]
           [--merged FILE.json]

``--merged`` writes the results read, with the title, in one file of gpu_compare.py's shape, for the plot to be drawn
again from it alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

FIGURES = (  # (key in a result, label)
    ("streams_1", "1 stream"),
    ("streams_16", "16 streams"),
    ("streams_64", "64 streams"),
    ("prefill_2048", "prefill 2k"),
    ("prefill_8192", "prefill 8k"),
)
DEFAULT_TITLE = "localinfer over llama-server, same llama.cpp build, model and flags"
TARGETS = ((1.0, "1.0x: prefill, 1 stream"), (1.3, "1.3x: 16 and 64 streams"))


def read_results(paths: list[Path]) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """The machine and the title of the first files that name them (a merged file: ``--merged``), and every model's
    result, in order."""
    machine: dict[str, Any] = {}
    title = ""
    results: list[dict[str, Any]] = []
    for path in paths:
        data = json.loads(path.read_text())
        machine = machine or data.get("machine", {})
        title = title or data.get("title", "")
        results.extend(data.get("results", [data]))  # partial.json: one model's result
    return machine, title, results


def ratio_and_range(figure: dict[str, Any]) -> tuple[float, float, float]:
    """The ratio of the medians, and localinfer's slowest and fastest round over llama-server's median."""
    theirs = figure["median"]["llama-server"]
    low, high = figure["spread"]["localinfer"]
    return figure["median"]["localinfer"] / theirs, low / theirs, high / theirs


def plot(results: list[dict[str, Any]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    width = 0.8 / max(len(results), 1)
    for m, result in enumerate(results):
        xs, ratios, lows, highs = [], [], [], []
        for f, (key, _) in enumerate(FIGURES):
            if key not in result:  # not measured for this model
                continue
            ratio, low, high = ratio_and_range(result[key])
            xs.append(f - 0.4 + width * (m + 0.5))
            ratios.append(ratio)
            lows.append(ratio - low)
            highs.append(high - ratio)
        label = f"{result['model']} (flash attention {result['flash_attn']})"
        ax.bar(xs, ratios, width * 0.9, label=label)
        ax.errorbar(xs, ratios, yerr=[lows, highs], fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    for y, text in TARGETS:
        ax.axhline(y, color="grey", linestyle="--" if y > 1 else "-", linewidth=0.8)
        ax.text(len(FIGURES) - 0.45, y, text, fontsize=7, va="bottom", ha="right", color="dimgrey")
    ax.set_xticks(range(len(FIGURES)), [label for _, label in FIGURES])
    ax.set_ylabel("localinfer / llama-server")
    ax.set_ylim(0, max(2.6, ax.get_ylim()[1]))
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("\n".join(textwrap.wrap(title, 90)), fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, nargs="+")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    p.add_argument("--title", help=f"default: a merged file's, else {DEFAULT_TITLE!r}")
    p.add_argument("--merged", type=Path, help="also write the results read, in one file")
    args = p.parse_args()
    machine, title, results = read_results(args.results)
    if not results:
        p.error("no results in the files given")
    title = args.title or title or DEFAULT_TITLE
    plot(results, args.out, title)
    if args.merged:
        sources = [str(path) for path in args.results]
        payload = {"machine": machine, "title": title, "sources": sources, "results": results}
        args.merged.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
