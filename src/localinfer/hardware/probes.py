"""Running probes in child processes: a command that hangs is stopped at its timeout, one that crashes is a
sentence, never an exception. Probes that initialise GPU libraries run here, so the main process stays clean."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROBE_MARKER = "LOCALINFER_PROBE "  # the probe's result line; anything else a library prints is ignored
PROBE_MODULE = "localinfer.hardware.libprobe"


@dataclass(frozen=True)
class CommandResult:
    stdout: str
    error: str | None = None  # a sentence when the command could not start, failed or timed out
    timed_out: bool = False


def library_probe_command(name: str) -> list[str]:
    """The command that runs the library probe ``name`` (``nvml``, ``llamacpp``, ``onnx``) in a fresh Python.

    The child finds localinfer where this process found it, even when an environment without ``PYTHONPATH``
    is passed (the folder is appended, so an installed localinfer still comes first)."""
    package_root = str(Path(__file__).resolve().parents[2])
    code = (
        f"import sys; sys.path.append({package_root!r}); from {PROBE_MODULE} import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code, name]


def run_command(argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
    """Run ``argv`` and return its standard output. Never raises: a command that cannot start, exits non-zero or
    runs past ``timeout`` seconds (it and its children are killed) comes back with ``error`` set."""
    program = os.path.basename(argv[0]) if argv else "?"
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=dict(env) if env is not None else None,
            start_new_session=os.name == "posix",
        )
    except (OSError, ValueError) as exc:
        return CommandResult("", f"{program} could not start: {exc}")
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return CommandResult("", f"{program} did not answer within {timeout:g} s and was stopped", timed_out=True)
    if proc.returncode != 0:
        return CommandResult(stdout, f"{program} failed ({_exit_reason(proc.returncode)}){_last_line(stderr, stdout)}")
    return CommandResult(stdout)


def run_library_probe(
    name: str, *, timeout: float, env: Mapping[str, str] | None = None, command: Sequence[str] | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """Run a library probe and return (its JSON result, None), or (a result, why) when it gave none.

    A probe that crashed or failed (a library that aborts on import) gives ``{"error": why}``, as a library that
    raises does; one that timed out gives None: what it would have said is unknown.
    """
    result = run_command(command or library_probe_command(name), timeout=timeout, env=env)
    data = parse_probe_output(result.stdout)
    if data is not None:
        return data, None
    why = f"the {name} probe gave no answer: {result.error or 'it printed no result'}"
    return (None if result.timed_out else {"error": why}), why


def parse_probe_output(stdout: str) -> dict[str, Any] | None:
    """The JSON object on the probe's last result line, or None when there is none or it is not an object."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(PROBE_MARKER):
            try:
                data = json.loads(line[len(PROBE_MARKER) :])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError):  # already gone
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):  # a grandchild outside the group may hold the pipes
        proc.communicate(timeout=2)


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _last_line(*texts: str) -> str:
    for text in texts:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return f": {lines[-1][:300]}"
    return ""
