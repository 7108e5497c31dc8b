"""Whether a model file fits this machine, for picking a quantization before anything is loaded."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localinfer.hardware.profile import HardwareProfile


def machine_fits(hardware: HardwareProfile | None = None) -> Callable[[int], bool]:
    """Whether a model file of so many bytes fits this machine (its GPUs when llama.cpp can use them, else its
    RAM), for picking a quantization; without ``hardware`` it is detected on the first question only."""
    found: list[HardwareProfile] = [hardware] if hardware is not None else []

    def fits(size: int) -> bool:
        from localinfer.hardware.detect import detect
        from localinfer.hardware.plan import fits_in

        if not found:
            found.append(detect())
        return fits_in(found[0], size)

    return fits
