"""Imports flow one way (docs/architecture.md): app -> bootstrap -> client -> engine -> backends -> {models,
hardware} -> {types, errors, config, defaults, progress}; quantize and convert (the model tools) stand beside the
backends, used by the app only.

Every module under src/localinfer is parsed with ``ast`` and every import counted: at the top, inside functions
and inside ``if TYPE_CHECKING:`` blocks alike. No rule makes an exception for TYPE_CHECKING-only imports: a type
named from a higher layer is still a dependency on it (and a cycle that only mypy sees is still one to untangle),
so a lower layer that needs a shape from above gets a small protocol or type of its own instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import localinfer

PACKAGE = Path(localinfer.__file__).parent
GROUND = {"localinfer.types", "localinfer.errors", "localinfer.config", "localinfer.defaults", "localinfer.progress"}

# layer -> the localinfer packages it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "localinfer.bootstrap": ("app",),  # the app's commands build through it; it never reaches back up
    "localinfer.hardware": ("backends", "engine", "app", "client", "bootstrap"),
    "localinfer.models": ("backends", "engine", "hardware", "app", "client", "bootstrap"),
    "localinfer.backends": ("engine", "app", "client", "bootstrap"),
    "localinfer.engine": ("app", "client", "bootstrap"),
    "localinfer.client": ("app", "bootstrap"),
    # the model tools beside the backends: the quantizer, and the ONNX conversion (which runs a backend to check it)
    "localinfer.quantize": ("backends", "engine", "app", "client", "bootstrap", "convert"),
    "localinfer.convert": ("engine", "app", "client", "bootstrap"),
}
TUI_APP = "localinfer.app.tui.app"
COMMANDS = PACKAGE / "app" / "commands"
TUI_SCREENS = "localinfer.app.tui.screens"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    return imports_in(path.read_text(encoding="utf-8"), module_name(path), is_package=path.name == "__init__.py")


def imports_in(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, relative imports resolved, wherever in it the
    import stands: at the top, in a function, under ``if TYPE_CHECKING:``. For ``from X import y`` both X and
    X.y, as y may be a module."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_imports_in_functions_type_checking_blocks_and_relative_ones_count() -> None:
    source = """
from typing import TYPE_CHECKING
from . import plan
from ..backends.base import Backend
if TYPE_CHECKING:
    from localinfer.engine.engine import Engine
def f() -> None:
    import localinfer.app.cli
"""
    found = imports_in(source, "localinfer.hardware.model_profile")
    assert {
        "localinfer.hardware.plan",
        "localinfer.backends.base",
        "localinfer.engine.engine",
        "localinfer.app.cli",
    } <= found


def test_a_lower_layer_importing_a_higher_one_is_caught() -> None:
    """The rule itself: each layer's imports of the layers above it are found, at the top or in a function."""
    for layer, banned in FORBIDDEN.items():
        for above in banned:
            source = f"def f() -> None:\n    from localinfer.{above} import x\n"
            found = imports_in(source, f"{layer}.some_module")
            assert any(within(i, f"localinfer.{above}") for i in found), (layer, above)


def is_command(path: Path) -> bool:
    """A module of app/commands that is a verb (it adds its parser, or the app's flags), not a helper."""
    source = path.read_text(encoding="utf-8")
    return path.name != "__init__.py" and ("def add_parser(" in source or "def add_arguments(" in source)


@pytest.mark.parametrize("path", sorted(COMMANDS.glob("*.py")), ids=lambda p: p.name)
def test_no_command_imports_another(path: Path) -> None:
    """Commands share helpers (progress_line, running_server, rpc_workers...), never each other."""
    if not is_command(path):
        return
    commands = {f"localinfer.app.commands.{p.stem}" for p in COMMANDS.glob("*.py") if is_command(p)}
    others = {i for i in imported(path) if i in commands and i != module_name(path)}
    assert not others, f"{module_name(path)} imports the commands {sorted(others)}: move what it needs to a helper"


def test_the_tree_is_found() -> None:
    names = {module_name(p) for p in MODULES}
    assert {"localinfer.hardware.plan", "localinfer.models.store", "localinfer.backends.base"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_imports_flow_one_way(path: Path) -> None:
    name = module_name(path)
    imports = {i for i in imported(path) if within(i, "localinfer")}
    broken = []
    for layer, banned in FORBIDDEN.items():
        if within(name, layer):
            broken += [i for i in imports for b in banned if within(i, f"localinfer.{b}")]
    if name in GROUND:
        # the ground floor imports only itself (``from localinfer import __version__`` names the root package)
        broken += [
            i
            for i in imports
            if i not in {"localinfer", "localinfer.__version__"} and not any(within(i, g) for g in GROUND)
        ]
    if within(name, TUI_SCREENS):
        broken += [i for i in imports if within(i, TUI_APP)]  # screens reach the app through messages
    assert not broken, f"{name} imports {sorted(set(broken))} against the import direction in DESIGN.md"
