"""docs/configuration.md's table of every setting says what ``Settings`` (src/localinfer/config.py) says: one row
per setting, none missing and none left over, each with the default the code has and the flag the parser takes."""

from __future__ import annotations

import re
from typing import Any

from pydantic_core import PydanticUndefined

from localinfer.app.cli import build_parser
from localinfer.config import Settings
from tests.docs.cli_reference import _verbs
from tests.docs.pages import DOCS

ROW = re.compile(r"^\| `(?P<name>[a-z_]+)` \| (?P<default>[^|]*) \| (?P<flag>[^|]*) \|", re.MULTILINE)
COMPUTED = {"home": "the platform's data folder"}  # defaults the code works out when it runs


def table() -> dict[str, tuple[str, str]]:
    """The rows of the settings table: name -> (default, flag) as written."""
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    section = text.split("## Every setting", 1)[1].split("\n## ", 1)[0]
    return {m["name"]: (m["default"].strip(), m["flag"].strip()) for m in ROW.finditer(section)}


def shown_default(name: str, default: Any) -> str:
    """A default as the table writes it."""
    if name in COMPUTED:
        return COMPUTED[name]
    if default is PydanticUndefined or default == "" or default in ([], {}):
        return "empty"
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def test_every_setting_has_one_row_and_every_row_is_a_setting() -> None:
    assert set(table()) == set(Settings.model_fields)


def test_each_rows_default_is_the_codes() -> None:
    rows = table()
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory and name not in COMPUTED else field.default  # type: ignore[call-arg]
        written = rows[name][0].split(" (")[0]  # a gloss after the value, e.g. "(16 MiB)", is the page's own
        assert written == shown_default(name, default), f"docs/configuration.md: {name}'s default"


def test_each_flag_the_table_names_is_one_a_command_takes() -> None:
    flags = {o for _, sub in _verbs(build_parser()) for a in sub._actions for o in a.option_strings}
    flags |= {o for a in build_parser()._actions for o in a.option_strings}
    for name, (_, flag) in table().items():
        for named in re.findall(r"`(--[a-z-]+)`", flag):
            assert named in flags, f"docs/configuration.md: {name}'s flag {named} is no flag of localinfer"
