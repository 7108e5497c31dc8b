"""Every relative link in README.md and docs/ leads somewhere: the file exists, and the anchor is a heading (or an
HTML anchor) of that page, as GitHub makes anchors and, for the docs site's pages, as MkDocs makes them too."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.docs.markdown import Link, anchors, links
from tests.docs.pages import DOCS, README, all_pages, doc_pages, shown

_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:...


def _renderers(page: Path) -> tuple[str, ...]:
    """Where ``page`` is read: README.md on the Git host only, a docs page there and on the site."""
    return ("github",) if page == README else ("github", "mkdocs")


def _broken(link: Link) -> str | None:
    """Why ``link`` leads nowhere, or None when it resolves."""
    path_part, _, anchor = link.target.partition("#")
    target = (link.page.parent / unquote(path_part)).resolve() if path_part else link.page
    if not target.exists():
        return f"{path_part} does not exist"
    if not anchor:
        return None
    if target.suffix != ".md":
        return f"#{anchor}: {target.name} is not a Markdown page"
    text = target.read_text(encoding="utf-8")
    missing = [r for r in _renderers(link.page) if anchor not in anchors(text, renderer=r)]
    if missing:
        return f"no heading gives #{anchor} on {' or '.join(missing)} in {shown(target)}"
    return None


def _relative(page: Path) -> list[Link]:
    return [link for link in links(page) if not _EXTERNAL.match(link.target)]


@pytest.mark.parametrize("page", all_pages(), ids=shown)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = [f"{shown(page)}:{link.line}: {link.target} ({why})" for link in _relative(page) if (why := _broken(link))]
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", doc_pages(), ids=shown)
def test_docs_pages_link_only_inside_docs(page: Path) -> None:
    """The site holds docs/ alone: a link out of it works on the Git host and is broken on the site (use the
    repository's URL for a file elsewhere)."""
    outside = [
        f"{shown(page)}:{link.line}: {link.target}"
        for link in _relative(page)
        if link.target.partition("#")[0]
        and not (page.parent / unquote(link.target.partition("#")[0])).resolve().is_relative_to(DOCS)
    ]
    assert not outside, "links out of docs/, broken on the site:\n" + "\n".join(outside)
