"""Text layout shared by the commands that print facts: titled sections of aligned ``label  value`` rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

LABEL_WIDTH = 20


def section(title: str, rows: Iterable[str]) -> list[str]:
    """``title`` indented two spaces, its rows four, and a blank line after."""
    return [f"  {title}", *(f"    {row}" for row in rows), ""]


def row(label: str, value: str | None, *, width: int = LABEL_WIDTH) -> str:
    """``label`` padded to ``width`` then ``value``; the label alone when ``value`` is None."""
    return label if value is None else f"{label.ljust(width)}{value}"


def format_parameters(count: int) -> str:
    """A parameter count the way model cards write it: ``134.5M``, ``1.2B``, ``950K``; below 1000 as is."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if round(count / scale, 1) >= 1:
            return f"{count / scale:.1f}".removesuffix(".0") + suffix
    return str(count)
