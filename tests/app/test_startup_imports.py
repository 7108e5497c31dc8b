"""``localinfer --version`` and ``--help`` start in a fraction of a second because the command line imports the
heavy libraries (llama.cpp, ONNX Runtime, Textual, FastAPI, uvicorn, numpy, gguf, pydantic-settings) only in the
commands that use them. Checked by what a fresh interpreter has imported, not by timing (bench/startup.py times
it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "llama_cpp",
    "onnxruntime",
    "onnxruntime_genai",
    "textual",
    "fastapi",
    "uvicorn",
    "numpy",
    "gguf",
    "pydantic_settings",
    "huggingface_hub",
    "httpx",
    "jinja2",
)

PROBE = """
import contextlib, io, json, sys
from localinfer.app.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):  # --version and --help exit
    main(sys.argv[1:])
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def imported_by(*args: str, home: Path) -> set[str]:
    env = {**os.environ, "LOCALINFER_HOME": str(home), "LOCALINFER_CONFIG": str(home / "no-config.toml")}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("--help",),
        ("serve", "--help"),
        ("quantize", "--help"),
        ("convert", "--help"),
        ("hw", "--help"),
        ("pull", "--help"),
    ],
    ids=" ".join,
)
def test_the_command_line_imports_no_heavy_library_before_a_command_needs_it(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    heavy = imported_by(*args, home=tmp_path) & set(HEAVY)
    assert not heavy, f"'localinfer {' '.join(args)}' imported {sorted(heavy)}"
