"""SmolLM2 converted to an int8 onnxruntime-genai model by the real ``localinfer convert``, once.

The result is registered in the persistent test home under a name keyed by the GGUF's sha256, the precision, the
builder's version and localinfer's converter version, so a later run (or CI's second run) finds it and converts
nothing. The command's output is kept beside it for the tests of what ``convert`` prints.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

from localinfer.convert.onnx import CONVERTER_VERSION
from localinfer.models.store import Manifest, ModelStore

PRECISION = "int8"
PREFIX = "smollm2-onnx-int8-"


def cli_env(home: Path, config_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LOCALINFER_HOME": str(home),
        "LOCALINFER_CONFIG": str(config_dir / "no-config.toml"),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def output_log(home: Path, name: str) -> Path:
    """Where the converting run's stdout and stderr are kept."""
    return home / "logs" / f"{name}.convert-output.txt"


def converted_name(gguf: Manifest) -> str:
    digest = gguf.files[0].sha256 or f"{gguf.path}:{gguf.size}"
    version = importlib.metadata.version("onnxruntime-genai")
    key = hashlib.sha256(f"{digest}|{PRECISION}|{version}|{CONVERTER_VERSION}".encode()).hexdigest()[:12]
    return PREFIX + key


def convert_once(gguf: Manifest, store: ModelStore, home: Path, scratch: Path) -> Manifest:
    """The converted model, converting it with ``localinfer convert`` in a subprocess when it is not there yet
    (earlier conversions of other keys are removed)."""
    name = converted_name(gguf)
    found = store.get(name)
    if found is not None and found.files_present():
        return found
    for old in store.list():
        if old.name.startswith(PREFIX):
            store.remove(old.name)
            output_log(home, old.name).unlink(missing_ok=True)
            (home / "logs" / f"convert-{old.name}.log").unlink(missing_ok=True)
    command = [sys.executable, "-m", "localinfer.app.cli", "convert", gguf.name, "--to", "onnx"]
    command += ["--precision", PRECISION, "--name", name]
    done = subprocess.run(command, env=cli_env(home, scratch), capture_output=True, text=True, timeout=900, check=False)
    log = output_log(home, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}", encoding="utf-8")
    assert done.returncode == 0, f"localinfer convert failed:\n{done.stderr}"
    converted = store.get(name)
    assert converted is not None
    return converted
