"""Modules stay small (DESIGN.md, "Rules that keep it livable"): none under src/localinfer is over 450 lines unless
its docstring says why (a line with "over 450 lines:" and the reason).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import localinfer

PACKAGE = Path(localinfer.__file__).parent
LIMIT = 450
REASON = "over 450 lines:"

MODULES = sorted(PACKAGE.rglob("*.py"))


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


@pytest.mark.parametrize("path", MODULES, ids=name)
def test_a_module_over_450_lines_says_why(path: Path) -> None:
    if lines(path) <= LIMIT:
        return
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    assert REASON in docstring, (
        f"{name(path)} has {lines(path)} lines: split it by concern, or say why not in its docstring ('{REASON} ...')"
    )
