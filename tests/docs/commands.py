"""The ``localinfer`` commands a page shows in its code blocks, as a user would copy them."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.docs.markdown import code_blocks

SHELL_BLOCKS = ("", "bash", "sh", "shell", "console", "shell-session", "zsh")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = ("|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1")


@dataclass(frozen=True)
class Command:
    """One ``localinfer`` command line of a page: its text and its arguments after ``localinfer``, with the
    environment assignments before it."""

    text: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    program: str = "localinfer"


def commands(page: Path) -> list[Command]:
    """Every command in ``page``'s shell code blocks that runs ``localinfer`` (a ``$`` prompt, ``VAR=value``
    assignments before it and a ``\\`` continuation understood; what follows a pipe or ``&&`` is not part of it)."""
    return [c for c in shell_commands(page) if c.program == "localinfer"]


def shell_commands(page: Path) -> list[Command]:
    """Every command line in ``page``'s shell code blocks, in order, whatever program it runs."""
    found = []
    for info, lines in code_blocks(page.read_text(encoding="utf-8")):
        if info.split(" ")[0].lower() not in SHELL_BLOCKS:
            continue
        for line in _joined(lines):
            command = _parse(line)
            if command is not None:
                found.append(command)
    return found


def _joined(lines: list[str]) -> list[str]:
    joined: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    return joined


def _parse(line: str) -> Command | None:
    text = line.strip().removeprefix("$ ").strip()
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    env = []
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env.append((name, value))
    if not words:
        return None
    args = []
    for word in words[1:]:
        if word in _OPERATORS:
            break
        args.append(word)
    return Command(re.sub(r"\s+#[^'\"]*$", "", text), tuple(args), tuple(env), program=words[0])
