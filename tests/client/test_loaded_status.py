"""How a loaded model's keep-alive and memory placement read in `localinfer ps` and the app's models screen."""

from __future__ import annotations

from localinfer.backends.base import DeviceUse
from localinfer.client.base import LoadedModelStatus


def status(**fields: object) -> LoadedModelStatus:
    base: dict[str, object] = {"name": "m", "backend": "llamacpp", "context_length": 2048, "slots": 2}
    return LoadedModelStatus(**{**base, **fields})  # type: ignore[arg-type]


def test_until_says_pinned_in_use_forever_or_when() -> None:
    assert status(pinned=True, expires_in=10.0).until() == "pinned"
    assert status(in_flight=2).until() == "in use (2)"
    assert status().until() == "forever"
    assert status(expires_in=299.6).until() == "in 5 min 0 s"
    assert status(expires_in=299.4).until() == "in 4 min 59 s"
    assert status(expires_in=299.4).until(exact=False) == "5 min"
    assert status(expires_in=12.2).until(exact=False) == "12 s"


def test_placement_reads_as_ollama_ps_says_it() -> None:
    assert status(memory_bytes=1000).placement() == "100% CPU"
    assert status(memory_bytes=1000, vram_bytes=1000).placement() == "100% GPU"
    assert status(memory_bytes=1000, vram_bytes=700).placement() == "30%/70% CPU/GPU"
    assert status(size_bytes=0).placement() == "100% CPU"


def test_placement_names_rpc_workers_as_such_not_as_a_gpu() -> None:
    """Layers offloaded to RPC workers are on other machines (which may lend a CPU): ``RPC``, not ``GPU``."""
    cpu, rpc0 = DeviceUse("CPU", "local", 30), DeviceUse("RPC0", "10.0.0.2:50052", 970)
    split = (cpu, rpc0, DeviceUse("RPC1", "10.0.0.3:50052", 2000))
    assert status(memory_bytes=1000, vram_bytes=1000, devices=(cpu, rpc0)).placement() == "3%/97% CPU/RPC"
    assert status(devices=(DeviceUse("RPC0", "10.0.0.2:50052", 5),)).placement() == "100% RPC"
    assert status(devices=split).placement() == "1%/99% CPU/RPC"
    local_gpu = (cpu, DeviceUse("CUDA0", "local", 470), DeviceUse("RPC0", "10.0.0.2:50052", 500))
    assert status(devices=local_gpu).placement() == "3%/47%/50% CPU/GPU/RPC"
    halves = (DeviceUse("CPU", "local", 496), DeviceUse("CUDA0", "local", 496), DeviceUse("RPC0", "h:1", 8))
    assert status(devices=halves).placement() == "50%/49%/1% CPU/GPU/RPC"  # the shares add up to 100, none is 0 %
    assert status(devices=(DeviceUse("RPC0", "h:1", 0),)).placement() == "100% RPC"
