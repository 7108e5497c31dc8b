"""What the docs generators and checks share about Markdown: text escaped into a table cell, the anchors a page
defines on GitHub and on MkDocs (their rules differ: a page must work on both), its links and its code blocks."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_SPECIAL = re.compile(r"([\\`*_\[\]<>|])")
_FENCE = re.compile(r"^ {0,3}(```+|~~~+)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HTML_SRC = re.compile(r"<(?:img|a|source)\b[^>]*?\s(?:src|href|srcset)=\"([^\"]+)\"")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def escape(text: str) -> str:
    """``text`` as literal Markdown inside a table cell: emphasis, code, link and HTML characters and ``|``
    backslash-escaped, newlines as spaces."""
    return _SPECIAL.sub(r"\\\1", " ".join(text.split()))


def prose(text: str) -> str:
    """A docstring's or comment's ``text`` as one line of Markdown: its reStructuredText literals (double
    backquotes) as code spans, everything else escaped as in ``escape``."""
    parts = re.split(r"``(.+?)``", " ".join(text.split()))
    return "".join(f"`{part}`" if i % 2 else _SPECIAL.sub(r"\\\1", part) for i, part in enumerate(parts))


def _heading_text(heading: str) -> str:
    """A heading as both renderers read it for its anchor: inline code marks, link targets and HTML tags gone."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("\\", "")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, every character but letters, digits, ``-``, ``_`` and spaces
    dropped, each space a ``-``."""
    text = re.sub(r"[^\w\- ]", "", _heading_text(heading).strip().lower())
    return text.replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """The anchor MkDocs gives a heading (Python-Markdown's toc ``slugify``): accents folded to ASCII and other
    non-ASCII dropped, punctuation but ``-`` and ``_`` dropped, lowercase, each run of spaces and ``-`` one ``-``."""
    text = unicodedata.normalize("NFKD", _heading_text(heading)).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@dataclass(frozen=True)
class Link:
    """A link target in a page, with the line it is on."""

    page: Path
    line: int
    target: str


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """``text``'s lines that are not inside a fenced code block, numbered from 1."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker[0] * len(marker)
                continue
            if marker.startswith(fence):
                fence = None
                continue
        if fence is None:
            yield number, line


def anchors(text: str, *, renderer: str) -> set[str]:
    """The anchors a page defines on ``renderer`` (``github`` or ``mkdocs``): one per heading, a repeated one with
    ``-1``, ``-2``... on GitHub and ``_1``, ``_2``... on MkDocs; and HTML ``<a name|id>`` anchors on both."""
    slugify, joiner = (github_slug, "-") if renderer == "github" else (mkdocs_slug, "_")
    found: set[str] = set()
    for _, line in prose_lines(text):
        found.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading is None:
            continue
        base = slugify(heading.group(2))
        anchor, n = base, 0
        while anchor in found or not anchor:
            n += 1
            anchor = f"{base}{joiner}{n}"
        found.add(anchor)
    return found


def links(page: Path) -> list[Link]:
    """Every link and image target in ``page`` outside code: inline, reference definitions and HTML src/href."""
    found: list[Link] = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        prose = _INLINE_CODE.sub("", line)
        for pattern in (_LINK, _IMAGE, _REFERENCE, _HTML_SRC):
            found.extend(Link(page, number, target) for target in pattern.findall(prose))
    return found


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """The fenced code blocks of ``text``: each block's info string (``bash``, ``console``...) and its lines."""
    blocks: list[tuple[str, list[str]]] = []
    fence: str | None = None
    info = ""
    body: list[str] = []
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            marker = match.group(1)
            fence, info, body = marker[0] * len(marker), line.strip()[len(marker) :].strip(), []
        elif fence is not None and match and match.group(1).startswith(fence) and not line.strip()[len(fence) :]:
            blocks.append((info, body))
            fence = None
        elif fence is not None:
            body.append(line)
    return blocks
