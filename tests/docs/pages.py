"""The pages the docs checks read: README.md and every Markdown page under docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def doc_pages() -> list[Path]:
    """Every Markdown page of the docs site, sorted."""
    return sorted(DOCS.rglob("*.md"))


def all_pages() -> list[Path]:
    """README.md, then the docs pages."""
    return [README, *doc_pages()]


def shown(page: Path) -> str:
    """``page`` as a test names it: its path from the repository root."""
    return page.relative_to(ROOT).as_posix()
