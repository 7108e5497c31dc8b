"""The ``localinfer`` commands in README.md and docs/ are ones the CLI takes: each is parsed by the real parser
(never run here; tests/docs/test_fresh_home.py runs the README's)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from localinfer.app.cli import build_parser
from tests.docs.commands import Command, commands
from tests.docs.pages import README, all_pages, shown


def _refusal(command: Command) -> str | None:
    """What the parser says of ``command``, or None when it takes it (``--help`` and ``--version`` included)."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(list(command.args))
    except SystemExit as exc:
        if exc.code not in (0, None):
            return stderr.getvalue().strip().splitlines()[-1]
    return None


def test_the_readme_shows_localinfer_commands() -> None:
    assert len(commands(README)) >= 5


@pytest.mark.parametrize("page", all_pages(), ids=shown)
def test_every_localinfer_command_shown_parses(page: Path) -> None:
    refused = [f"{c.text}: {why}" for c in commands(page) if (why := _refusal(c))]
    assert not refused, f"commands in {shown(page)} that localinfer refuses:\n" + "\n".join(refused)
