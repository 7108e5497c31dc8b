"""Writes the generated reference pages, docs/cli.md and docs/api-fields.md, from the code that has the facts;
``--check`` says which are out of date instead (exit 1). Run it as ``scripts/gen-docs``."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.docs.pages import DOCS

REGENERATE = "scripts/gen-docs"


def cli_page() -> str:
    """docs/cli.md as the parser says it now."""
    from localinfer.app.cli import build_parser
    from tests.docs import cli_reference

    return cli_reference.render(build_parser())


def api_fields_page() -> str:
    """docs/api-fields.md as the server's routes and wire models say it now."""
    from tests.docs import api_fields

    with tempfile.TemporaryDirectory() as home:
        return api_fields.render(api_fields.build_app(Path(home)))


PAGES: dict[str, Callable[[], str]] = {"cli.md": cli_page, "api-fields.md": api_fields_page}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, render in PAGES.items():
        path = DOCS / name
        text = render()
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text, encoding="utf-8")
            print(f"wrote docs/{name}")
    if args.check and stale:
        print(f"out of date: {', '.join('docs/' + n for n in stale)}; run {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
