"""The planner with llama.cpp RPC workers: their memory counted beside this machine's, the offloaded layers cut
over their devices and the local GPUs by the memory each reports (or --tensor-split), and each choice explained."""

from __future__ import annotations

import pytest

from localinfer.errors import ConfigError
from localinfer.hardware.plan import Overrides, plan
from localinfer.hardware.profile import GiB
from localinfer.hardware.rpc_devices import RemoteDevice, Target, numbered, split_layers
from tests.hardware.profiles import HARDWARE, MODELS

MiB = 1 << 20


def _workers(*gib: float) -> tuple[RemoteDevice, ...]:
    return numbered([(f"10.0.0.{i + 2}:50052", [(int(g * GiB), int(g * GiB))]) for i, g in enumerate(gib)])


def test_devices_are_named_as_llama_cpp_numbers_them_over_the_workers() -> None:
    devices = numbered([("a:1", [(1, 2), (3, 4)]), ("b:1", [(5, 6)])])
    assert [(d.name, d.endpoint, d.index, d.free) for d in devices] == [
        ("RPC0", "a:1", 0, 1),
        ("RPC1", "a:1", 1, 3),
        ("RPC2", "b:1", 0, 5),
    ]


def test_layers_are_shared_by_the_memory_each_device_reports() -> None:
    targets = [Target("RPC0", "a:1", 1024 * MiB, 700 * MiB), Target("RPC1", "b:1", 3072 * MiB, 2700 * MiB)]
    cut = split_layers(targets, 30, 10 * MiB, None, ())
    assert cut.layers == 31 and cut.fits
    assert [(p.first, p.last, p.share) for p in cut.placed] == [(0, 7, 0.25), (8, 30, 0.75)]
    assert cut.reasons[1] == (
        "layers 0-7 on RPC0, 8-29 and the output on RPC1 (RPC0 = a:1 (1024 MiB free, share 25%); "
        "RPC1 = b:1 (3072 MiB free, share 75%))"
    )


def test_a_tensor_split_overrides_the_memory() -> None:
    targets = [Target("RPC0", "a:1", 1024 * MiB, 700 * MiB), Target("RPC1", "b:1", 3072 * MiB, 2700 * MiB)]
    cut = split_layers(targets, 30, 10 * MiB, None, (1.0, 1.0))
    assert [(p.first, p.last) for p in cut.placed] == [(0, 15), (16, 30)]
    assert "as --tensor-split 1,1 says" in cut.reasons[0]


def test_layers_the_devices_cannot_hold_stay_on_this_machines_cpu() -> None:
    targets = [Target("RPC0", "a:1", 1024 * MiB, 100 * MiB)]
    cut = split_layers(targets, 30, 10 * MiB, None, ())
    assert cut.layers == 10 and cut.fits
    assert [(p.first, p.last) for p in cut.placed] == [(21, 30)]
    assert cut.reasons[0] == (
        "10 of 31 layers (as many as their memory holds) over RPC0, shared by the memory each reports free; the "
        "first 21 stay on this machine's CPU (each layer takes 10 MiB with its KV cache; they offer 100 MiB)"
    )


def test_layers_asked_for_beyond_a_devices_memory_are_said_to_fail() -> None:
    targets = [Target("RPC0", "a:1", 1024 * MiB, 100 * MiB)]
    cut = split_layers(targets, 30, 10 * MiB, -1, ())
    assert cut.layers == 31 and not cut.fits
    assert (
        cut.reasons[-1]
        == "RPC0 gets 31 layers (310 MiB with their KV cache) but has 100 MiB for them: the load may fail"
    )


def test_more_shares_than_devices_is_refused() -> None:
    with pytest.raises(ConfigError, match="--tensor-split gives 3 shares for 2 devices"):
        split_layers([Target("RPC0", "a:1", 1, 1), Target("RPC1", "b:1", 1, 1)], 30, 1, None, (1.0, 1.0, 1.0))


def test_the_workers_memory_makes_a_model_fit_that_this_machine_alone_cannot_hold() -> None:
    machine, model = HARDWARE["8 GB RAM machine"], MODELS["Llama 3.1 8B Q4_K_M"]
    alone = plan(machine, model, Overrides(ctx_size=8192))
    assert not alone.fits
    split = plan(machine, model, Overrides(ctx_size=8192, rpc_workers=2, rpc_devices=_workers(4, 12)))
    assert split.fits and split.device == "rpc" and split.gpu_layers == 33
    assert [(p.name, p.first, p.last) for p in split.split] == [("RPC0", 0, 8), ("RPC1", 9, 32)]


def test_the_workers_come_before_this_machines_gpu_as_llama_cpp_orders_them() -> None:
    machine, model = HARDWARE["RTX 3060 12 GB"], MODELS["Llama 3.3 70B Q4_K_M"]
    chosen = plan(machine, model, Overrides(rpc_workers=1, rpc_devices=_workers(64)))
    assert chosen.device == "rpc+cuda:0"
    assert [p.name for p in chosen.split] == ["RPC0", "CUDA0"]
    assert [p.where for p in chosen.split] == ["10.0.0.2:50052", "NVIDIA GeForce RTX 3060"]
    assert chosen.split[0].first == 0 and chosen.split[1].last == 80


def test_no_layer_is_offloaded_when_none_is_asked_for() -> None:
    machine, model = HARDWARE["8 GB RAM machine"], MODELS["SmolLM2 135M Q4_1"]
    chosen = plan(machine, model, Overrides(gpu_layers=0, rpc_workers=1, rpc_devices=_workers(4)))
    assert (chosen.gpu_layers, chosen.device, chosen.split) == (0, "cpu", ())
