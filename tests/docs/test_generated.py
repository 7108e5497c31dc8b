"""The generated reference pages are what their generators write from the code now."""

from __future__ import annotations

from tests.docs.generate import REGENERATE, api_fields_page, cli_page
from tests.docs.pages import DOCS


def test_cli_md_is_what_the_parser_says() -> None:
    written = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert written == cli_page(), f"docs/cli.md is out of date with the parser: run {REGENERATE}"


def test_api_fields_md_is_what_the_wire_models_say() -> None:
    written = (DOCS / "api-fields.md").read_text(encoding="utf-8")
    assert written == api_fields_page(), f"docs/api-fields.md is out of date with the server's models: run {REGENERATE}"
