"""The docs site builds with MkDocs in strict mode (mkdocs.yml: every page in the nav, links and anchors checked
as the site makes them); the ``docs`` extra installs it, and scripts/test installs that extra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.docs.pages import ROOT


def test_the_site_builds_strict(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's end-of-life notice, on every build
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "cli" / "index.html").is_file()
