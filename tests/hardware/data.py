"""Recorded outputs for the hardware detection tests, in ``tests/hardware/data/``."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"


def recorded(name: str) -> str:
    """The text of the recorded file ``name``."""
    return (DATA / name).read_text()
