"""Where llama.cpp puts a model's layers: the first ones that are not offloaded stay on the CPU, the offloaded ones
are cut among the devices in proportion to their shares (llama-model.cpp, ``load_tensors``). Pure: the shares are
passed to llama.cpp as its tensor_split, so what this says is what llama.cpp does. The planner (``hw --plan``)
and the loader (the load log) both explain a split with it."""

from __future__ import annotations

import ctypes
from bisect import bisect_right
from collections.abc import Sequence

from localinfer.errors import ConfigError


def parse_tensor_split(text: str) -> tuple[float, ...]:
    """llama-server's --tensor-split: shares per device, comma-separated (``3,1``). Raises ConfigError."""
    if not text.strip():
        return ()
    try:
        shares = tuple(float(part) for part in text.replace("/", ",").split(","))
    except ValueError:
        shares = ()
    if not shares or any(s < 0 for s in shares) or sum(shares) <= 0:
        raise ConfigError(f"'{text}' is not a tensor split", hint="give a share per device, e.g. --tensor-split 3,1")
    return shares


def assign(n_layer: int, gpu_layers: int, shares: Sequence[float]) -> list[int]:
    """The device of each of the ``n_layer`` layers and then the output layer: -1 for the CPU, else the index into
    ``shares`` (one per offload device, not all zero), as llama.cpp assigns them with ``gpu_layers`` offloaded."""
    if not shares or sum(shares) <= 0:
        return [-1] * (n_layer + 1)
    sums, running = [], 0.0
    for share in shares:  # in single precision, as llama.cpp adds them up
        running = _f32(running + _f32(share))
        sums.append(running)
    bounds = [_f32(s / running) for s in sums]
    first = max(n_layer + 1 - gpu_layers, 0)
    offloaded = min(gpu_layers, n_layer + 1)
    where = []
    for layer in range(n_layer + 1):
        if layer < first or layer - first >= offloaded:
            where.append(-1)
        else:
            where.append(min(bisect_right(bounds, _f32((layer - first) / offloaded)), len(shares) - 1))
    return where


def _f32(x: float) -> float:
    return ctypes.c_float(x).value


def describe(where: Sequence[int], names: Sequence[str]) -> str:
    """``layers 0-10 on CPU, 11-20 on RPC0, 21-29 and the output on RPC1``: runs of layers per device, the last
    entry of ``where`` being the output layer."""
    runs: list[tuple[int, int, int]] = []  # device, first, last
    for layer, device in enumerate(where):
        if runs and runs[-1][0] == device and runs[-1][2] == layer - 1:
            runs[-1] = (device, runs[-1][1], layer)
        else:
            runs.append((device, layer, layer))
    output = len(where) - 1
    parts = []
    for device, first, last in runs:
        name = "CPU" if device < 0 else names[device]
        if first == output:
            parts.append(f"the output on {name}")
            continue
        span = f"{first}" if first == min(last, output - 1) else f"{first}-{min(last, output - 1)}"
        parts.append(f"{span}{' and the output' if last == output else ''} on {name}")
    return "layers " + ", ".join(parts)


def explain(where: Sequence[int], devices: Sequence[tuple[str, str, int]], shares: Sequence[float]) -> str:
    """``describe`` and then each device as the load log names it: ``(RPC0 = 10.0.0.2:50052 (1024 MiB free, share
    25%); ...)``; ``devices`` are (name, description, free bytes), one per share."""
    total = sum(shares)
    listed = "; ".join(
        f"{name} = {description} ({free >> 20} MiB free, share {share / total:.0%})"
        for (name, description, free), share in zip(devices, shares, strict=True)
    )
    return f"{describe(where, [name for name, _, _ in devices])} ({listed})"
