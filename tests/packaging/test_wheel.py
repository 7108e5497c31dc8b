"""The other way in: a wheel of localinfer (``pip wheel .``, as ``python -m build`` and ``pipx install .`` make
it) installs into a fresh virtual environment with the AMX-safe llama-cpp-python that scripts/setup built, and
the installed command answers on a real model. The wheel carries the package's data files (the app's stylesheet,
the default text of perplexity)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from localinfer import __version__
from localinfer.models.store import Manifest

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def setup_wheel() -> Path:
    """The llama-cpp-python wheel scripts/setup built and installed (its path is the first line of its stamp)."""
    stamp = (ROOT / ".venv" / ".localinfer-setup").read_text().splitlines()[0]
    return Path(stamp.split("|", 1)[0])


def test_the_wheel_installs_in_a_fresh_venv_and_answers(smollm2: Manifest, tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w", str(tmp_path / "wheels")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheels").glob("localinfer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "localinfer/app/tui/app.tcss" in names and "localinfer/quantize/data/default.txt" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(setup_wheel()), str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]

    command = env_dir / "bin" / "localinfer"
    env = {**os.environ, "LOCALINFER_HOME": str(tmp_path / "home"), "LOCALINFER_DISCOVER": "false"}
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert version.stdout.strip() == f"localinfer {__version__}", version.stderr
    answer = subprocess.run(
        [str(command), "run", str(smollm2.path), "Say hello.", "--max-tokens", "6", "--url", "http://127.0.0.1:9"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert answer.returncode == 0 and answer.stdout.strip(), answer.stderr[-3000:]
