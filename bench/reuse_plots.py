"""Plots of KV cache reuse by shifting, from the results of bench/infill_typing.py and bench/chat_trimming.py:
docs/img/infill-typing.png (each keystroke's latency per engine) and docs/img/chat-trimming.png (time to first
token turn by turn, per engine). Needs matplotlib (the bench extra).

Usage: .venv/bin/python bench/reuse_plots.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchlib import REPO_ROOT, RESULTS_DIR

IMG = REPO_ROOT / "docs" / "img"


def infill(results: dict[str, Any], plt: Any) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = list(results["sessions"])
    keystrokes = [[r["ms"] for s in results["sessions"][name] for r in s[1:]] for name in names]
    ax.boxplot(keystrokes, orientation="horizontal", tick_labels=names)
    ax.set_xlabel("ms per /infill keystroke (one typed character, 16 tokens predicted)")
    ax.set_xlim(left=0)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title("A keystroke in a ~1,750-token file, SmolLM2 FIM model, 2 CPU cores", fontsize=10)
    fig.tight_layout()
    path = IMG / "infill-typing.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def chat(results: dict[str, Any], plt: Any) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, figures in results.items():
        if isinstance(figures, dict) and "ttft_ms_per_turn" in figures:
            turns = figures["ttft_ms_per_turn"]
            ax.plot(range(1, len(turns) + 1), turns, marker="o", markersize=3, label=name)
    ax.set_xlabel("turn (the client drops the oldest turns once the history passes its budget)")
    ax.set_ylabel("time to first token, ms (median)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("A long chat trimmed to fit, SmolLM2 135M, 2 CPU cores", fontsize=10)
    fig.tight_layout()
    path = IMG / "chat-trimming.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (LOCALINFER_EXTRAS=dev,bench scripts/setup)", file=sys.stderr)
        return 1
    IMG.mkdir(parents=True, exist_ok=True)
    for source, draw in (("infill-typing.json", infill), ("chat-trimming.json", chat)):
        path = RESULTS_DIR / source
        if path.exists():
            print(draw(json.loads(path.read_text()), plt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
