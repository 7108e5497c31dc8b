"""Pull speed: `localinfer pull` against huggingface_hub's own `hf download`, from a Hub stand-in on loopback.

Both fetch the same GGUF file from `tests/hub_standin.py` (a real HTTP server on 127.0.0.1) into empty Hugging
Face caches. `localinfer pull` also checks the sha256 and the GGUF header and registers the model; `hf download`
checks only the size. The third figure is a pull of a model already present (metadata requests only).

Usage: .venv/bin/python bench/pull.py --model PATH [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hub_standin import HubStandIn

REPO = "bench/model-GGUF"


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(command, env=env, check=True, capture_output=True)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a GGUF file to serve")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    filename = "model-Q4_K_M.gguf"
    megabytes = args.model.stat().st_size / 1e6
    with HubStandIn() as hub, tempfile.TemporaryDirectory() as scratch:
        hub.add_repo(REPO, {filename: args.model})
        for run in range(1, args.runs + 1):
            ours, theirs = Path(scratch, "ours"), Path(scratch, "theirs")
            for folder in (ours, theirs):
                shutil.rmtree(folder, ignore_errors=True)
            env = {
                **os.environ,
                "HF_ENDPOINT": hub.url,
                "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HOME": str(ours / "hf"),
                "LOCALINFER_HOME": str(ours / "home"),
            }
            pull = [str(bin_dir / "localinfer"), "pull", "-q", REPO]
            fresh = timed(pull, env)
            hf = timed([str(bin_dir / "hf"), "download", REPO, filename], {**env, "HF_HOME": str(theirs / "hf")})
            present = timed(pull, env)
            print(
                f"run {run}: localinfer pull {fresh:.2f} s ({megabytes / fresh:.0f} MB/s)  "
                f"hf download {hf:.2f} s ({megabytes / hf:.0f} MB/s)  pull again {present:.2f} s"
            )


if __name__ == "__main__":
    main()
