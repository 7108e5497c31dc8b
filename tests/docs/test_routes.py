"""Every route the server registers is in docs/api.md, by its path."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.api_fields import build_app, served_routes
from tests.docs.pages import DOCS

# a path parameter as the docs may write it: {model}, <model>, :model
_PARAMETER = r"(?:\{[^}/]+\}|<[^>/]+>|:\w+)"


def _pattern(path: str) -> re.Pattern[str]:
    """``path`` as it appears in prose: not inside a longer path, any spelling of its parameters."""
    parts = re.split(r"\{[^}]+\}", path)
    body = _PARAMETER.join(re.escape(part) for part in parts)
    return re.compile(rf"(?<![\w/.{{-]){body}(?![\w/}}-])")


def test_every_served_route_is_in_api_md(tmp_path: Path) -> None:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    paths = dict.fromkeys(route.path for route in served_routes(build_app(tmp_path)))
    missing = [path for path in paths if not _pattern(path).search(text)]
    assert not missing, "docs/api.md does not name these routes the server serves: " + ", ".join(missing)
