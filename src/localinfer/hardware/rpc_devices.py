"""The devices of llama.cpp RPC workers (``serve --rpc``), as the planner counts them beside this machine's GPUs:
each one's address, name and memory, as its worker reports them (the RPC protocol's GET_DEVICE_MEMORY), and where
a model's offloaded layers go among them all."""

from __future__ import annotations

from dataclasses import dataclass

from localinfer.errors import ConfigError
from localinfer.hardware import layer_split

MIB = 1 << 20


@dataclass(frozen=True)
class RemoteDevice:
    """Device ``index`` of the worker at ``endpoint``; ``name`` as llama.cpp numbers RPC devices in one process
    (RPC0, RPC1... over the workers in the order given); ``free``/``total`` in bytes as the worker reports them
    (a CPU reports all its RAM as free; ``localinfer rpc --mem`` caps both)."""

    endpoint: str
    index: int
    name: str
    free: int
    total: int


def numbered(memory: list[tuple[str, list[tuple[int, int]]]]) -> tuple[RemoteDevice, ...]:
    """The devices of each worker, given as (endpoint, [(free, total) per device]) in the order of ``--rpc``,
    named as llama.cpp names them when it registers the workers in that order."""
    devices: list[RemoteDevice] = []
    for endpoint, per_device in memory:
        for index, (free, total) in enumerate(per_device):
            devices.append(RemoteDevice(endpoint, index, f"RPC{len(devices)}", free, total))
    return tuple(devices)


@dataclass(frozen=True)
class Target:
    """A device that may take offloaded layers: ``name`` as llama.cpp logs it, ``where`` it is (a worker's
    address, or what this machine's GPU is), the memory it reports free (what llama.cpp shares by) and what
    layers may take of it (less a margin and llama.cpp's compute buffers)."""

    name: str
    where: str
    free: int
    budget: int


@dataclass(frozen=True)
class Placed:
    """A device's part of the offloaded layers: its share (0-1) and its layers ``first``-``last`` (the output
    layer is number n_layers; -1, -1: none)."""

    name: str
    where: str
    free: int
    share: float
    first: int
    last: int


@dataclass(frozen=True)
class Split:
    """Layers offloaded (the output layer counts as one), where each device's go, whether every device has the
    memory for its part, and why, a sentence each."""

    layers: int
    placed: tuple[Placed, ...]
    fits: bool
    reasons: tuple[str, ...]


def split_layers(
    targets: list[Target], n_layers: int, per_layer: int, asked: int | None, tensor_split: tuple[float, ...]
) -> Split:
    """Where a model's ``n_layers`` layers and its output layer go over ``targets`` (the workers' devices, then
    this machine's GPUs: llama.cpp's order): ``asked`` offloaded (-1: all; None: as many as the devices' budgets
    hold, each ``per_layer`` bytes with its KV cache; the first ones left stay on this machine's CPU), cut in
    proportion to ``tensor_split`` or else to the memory each device reports free, as llama.cpp cuts them.
    Raises ConfigError for more shares than devices."""
    total = n_layers + 1
    if len(tensor_split) > len(targets):
        raise ConfigError(
            f"--tensor-split gives {len(tensor_split)} shares for {len(targets)} devices "
            f"({', '.join(t.name for t in targets)})",
            hint="give one share per device, the RPC workers first",
        )
    if tensor_split:
        shares = tensor_split + (0.0,) * (len(targets) - len(tensor_split))
        how = "as --tensor-split " + ",".join(f"{s:g}" for s in tensor_split) + " says"
    else:
        shares = tuple(float(t.free) for t in targets)
        how = "by the memory each reports free"
        if sum(shares) <= 0:
            shares, how = (1.0,) * len(targets), "evenly (none reports its memory)"

    def over(layers: int) -> list[tuple[Target, int]]:
        where = layer_split.assign(n_layers, layers, shares)
        counts = [where.count(i) for i in range(len(targets))]
        return [(t, c) for t, c in zip(targets, counts, strict=True) if c * per_layer > t.budget]

    if asked is None:
        layers = next(n for n in range(total, -1, -1) if not over(n))
        said = "all" if layers == total else "as many as their memory holds"
    else:
        layers = total if asked < 0 else min(asked, total)
        said = "as asked"
    where = layer_split.assign(n_layers, layers, shares)
    names = ", ".join(t.name for t in targets)
    reasons = [f"{layers} of {total} layers ({said}) over {names}, shared {how}"]
    if layers < total:
        offered = sum(t.budget for t in targets)
        reasons[0] += f"; the first {total - layers} stay on this machine's CPU" + (
            f" (each layer takes {per_layer / MIB:.0f} MiB with its KV cache; they offer {offered / MIB:.0f} MiB)"
            if asked is None
            else ""
        )
    reasons.append(layer_split.explain(where, [(t.name, t.where, t.free) for t in targets], shares))
    short = over(layers)
    for target, count in short:
        reasons.append(
            f"{target.name} gets {count} layers ({count * per_layer / MIB:.0f} MiB with their KV cache) but has "
            f"{target.budget / MIB:.0f} MiB for them: the load may fail"
        )
    placed = []
    for i, (target, share) in enumerate(zip(targets, shares, strict=True)):
        mine = [layer for layer, device in enumerate(where) if device == i]
        placed.append(
            Placed(
                target.name,
                target.where,
                target.free,
                share / sum(shares),
                mine[0] if mine else -1,
                mine[-1] if mine else -1,
            )
        )
    return Split(layers, tuple(placed), not short, tuple(reasons))
