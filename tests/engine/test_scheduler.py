"""The scheduler with fakes: a backend that loads in no time, a machine whose free memory is what its loaded models
leave, and a clock moved by hand. What these show is proven end to end with real models in
tests/app/server/test_scheduling.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from localinfer.engine.scheduler import ModelTooLarge, Runner, Scheduler
from localinfer.errors import ModelLoadError, ServerShuttingDown
from localinfer.models.store import Manifest, ModelFile

GiB = 2**30


def manifest(name: str, size_gib: float) -> Manifest:
    size = int(size_gib * GiB)
    files = (ModelFile(path=Path(f"/models/{name}.gguf"), size=size, sha256=None),)
    return Manifest(name=name, source=f"test:{name}", format="gguf", files=files, quantization=None, created=0)


@dataclass
class FakeBackend:
    name: str
    n_ctx: int = 0
    loaded: bool = False

    @property
    def facts(self) -> SimpleNamespace:
        return SimpleNamespace(n_ctx=self.n_ctx)


@dataclass
class Machine:
    """Free memory is ``ram`` less what the loaded models take; loads and unloads are recorded."""

    ram: int = 10 * GiB
    fail: set[str] = field(default_factory=set)
    loads: list[str] = field(default_factory=list)
    unloads: list[str] = field(default_factory=list)
    now: float = 0.0
    gate: asyncio.Event | None = None  # when set, loads wait for it
    scheduler: Scheduler | None = None

    def new_runner(self, m: Manifest, ctx_size: int | None) -> Runner:
        backend = FakeBackend(m.name, ctx_size or 1024)
        return Runner(m, backend, asyncio.get_running_loop().create_future(), ctx_size)  # type: ignore[arg-type]

    async def load(self, runner: Runner) -> None:
        self.loads.append(runner.name)
        if self.gate is not None:
            await self.gate.wait()
        if runner.name in self.fail:
            raise ModelLoadError(f"cannot load {runner.name}")
        runner.backend.loaded = True  # type: ignore[attr-defined]

    async def unload(self, runner: Runner) -> None:
        self.unloads.append(runner.name)
        runner.backend.loaded = False  # type: ignore[attr-defined]

    def free(self, asked: Iterable[str]) -> dict[str, int]:
        assert self.scheduler is not None
        taken = sum(r.need.get("ram", 0) for r in self.scheduler.runners() if r.is_ready)
        return {"ram": self.ram - taken}

    def clock(self) -> float:
        return self.now


def scheduler_on(machine: Machine, *, max_loaded: int = 0, keep_alive: float | None = 300.0) -> Scheduler:
    scheduler = Scheduler(
        machine.new_runner,
        machine.load,
        machine.unload,
        estimate=lambda m, ctx: {"ram": m.size},
        free_memory=machine.free,
        clock=machine.clock,
        max_loaded=max_loaded,
        keep_alive=keep_alive,
    )
    machine.scheduler = scheduler
    return scheduler


async def use(scheduler: Scheduler, m: Manifest, **kwargs: object) -> Runner:
    """One request on ``m``, done."""
    runner = await scheduler.acquire(m, **kwargs)  # type: ignore[arg-type]
    scheduler.release(runner)
    return runner


def loaded(scheduler: Scheduler) -> set[str]:
    return {r.name for r in scheduler.runners() if r.is_ready}


A, B, C = manifest("a", 4), manifest("b", 4), manifest("c", 4)


async def test_the_least_recently_used_idle_model_makes_room() -> None:
    machine = Machine()
    scheduler = scheduler_on(machine)
    await use(scheduler, A)
    machine.now = 1
    await use(scheduler, B)
    machine.now = 2
    await use(scheduler, A)  # now b is the least recently used
    machine.now = 3
    await use(scheduler, C)
    assert machine.unloads == ["b"] and loaded(scheduler) == {"a", "c"}


async def test_a_pinned_model_is_never_evicted() -> None:
    machine = Machine()
    scheduler = scheduler_on(machine)
    await use(scheduler, A, pin=True)
    machine.now = 1
    await use(scheduler, B)
    machine.now = 2
    await use(scheduler, C)  # a is older, but pinned: b goes
    assert machine.unloads == ["b"] and loaded(scheduler) == {"a", "c"}
    machine.now = 3
    await use(scheduler, B)  # c goes, never a
    assert machine.unloads == ["b", "c"] and loaded(scheduler) == {"a", "b"}


async def test_a_model_with_a_request_in_flight_is_not_evicted_the_new_one_waits() -> None:
    machine = Machine(ram=6 * GiB)
    scheduler = scheduler_on(machine)
    busy = await scheduler.acquire(A)
    waiting = asyncio.create_task(use(scheduler, B))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done() and machine.unloads == [] and loaded(scheduler) == {"a"}
    scheduler.release(busy)
    await waiting
    assert machine.unloads == ["a"] and loaded(scheduler) == {"b"}


async def test_keep_alive_unloads_an_idle_model_once_its_time_has_passed_by_the_clock() -> None:
    machine = Machine()
    scheduler = scheduler_on(machine)
    runner = await use(scheduler, A, keep_alive=2.0)
    assert scheduler.expires_in(runner) == 2.0
    machine.now = 1.9
    assert scheduler.reap() == [] and loaded(scheduler) == {"a"}
    machine.now = 2.0
    assert scheduler.reap() == ["a"]
    await scheduler.wait_unloads()
    assert machine.unloads == ["a"] and loaded(scheduler) == set()


async def test_keep_alive_counts_from_the_end_of_the_last_request() -> None:
    machine = Machine()
    scheduler = scheduler_on(machine, keep_alive=10.0)
    first = await scheduler.acquire(A)
    second = await scheduler.acquire(A)
    scheduler.release(first)
    machine.now = 50  # one request still in flight: no expiry
    assert scheduler.reap() == [] and scheduler.expires_in(second) is None
    scheduler.release(second)
    machine.now = 59
    assert scheduler.reap() == []
    machine.now = 60
    assert scheduler.reap() == ["a"]


async def test_keep_alive_zero_unloads_after_the_request_and_a_negative_one_keeps_it() -> None:
    machine = Machine()
    scheduler = scheduler_on(machine)
    runner = await scheduler.acquire(A, keep_alive=0)
    assert loaded(scheduler) == {"a"}  # not while the request runs
    scheduler.release(runner)
    await scheduler.wait_unloads()
    assert machine.unloads == ["a"]
    await use(scheduler, B, keep_alive=-1)
    machine.now = 10**9
    assert scheduler.reap() == [] and loaded(scheduler) == {"b"}


async def test_two_requests_for_a_model_being_loaded_share_one_load() -> None:
    machine = Machine(gate=asyncio.Event())
    scheduler = scheduler_on(machine)
    requests = [asyncio.create_task(use(scheduler, A)) for _ in range(3)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert machine.loads == ["a"] and scheduler.is_loading()
    assert machine.gate is not None
    machine.gate.set()
    runners = await asyncio.gather(*requests)
    assert machine.loads == ["a"] and len({id(r) for r in runners}) == 1


async def test_a_failed_load_leaves_the_loaded_models_serving() -> None:
    machine = Machine(fail={"b"})
    scheduler = scheduler_on(machine)
    await use(scheduler, A)
    with pytest.raises(ModelLoadError, match="cannot load b"):
        await use(scheduler, B)
    assert loaded(scheduler) == {"a"} and scheduler.get("b") is None
    await use(scheduler, A)
    assert machine.loads == ["a", "b"]  # a served on without loading again


async def test_a_model_too_large_even_alone_is_refused_with_what_it_needs_and_what_is_free() -> None:
    machine = Machine(ram=10 * GiB)
    scheduler = scheduler_on(machine)
    await use(scheduler, A)
    with pytest.raises(ModelTooLarge) as refused:
        await use(scheduler, manifest("huge", 12))
    assert "needs 12.0 GiB of RAM" in refused.value.message and "10.0 GiB of RAM" in refused.value.message
    assert loaded(scheduler) == {"a"} and machine.unloads == []  # nothing evicted for a load that cannot happen


async def test_max_loaded_evicts_the_least_recently_used_even_when_memory_would_hold_more() -> None:
    machine = Machine(ram=100 * GiB)
    scheduler = scheduler_on(machine, max_loaded=1)
    await use(scheduler, A)
    machine.now = 1
    await use(scheduler, B)
    assert machine.unloads == ["a"] and loaded(scheduler) == {"b"}


async def test_max_loaded_with_every_slot_pinned_is_a_clear_error() -> None:
    machine = Machine(ram=100 * GiB)
    scheduler = scheduler_on(machine, max_loaded=1)
    await use(scheduler, A, pin=True)
    with pytest.raises(ModelLoadError, match="pinned"):
        await use(scheduler, B)


async def test_a_shorter_context_never_reloads_a_longer_one_reloads_only_when_idle() -> None:
    machine = Machine()
    scheduler = scheduler_on(machine)
    first = await use(scheduler, A, ctx_size=4096)
    assert await use(scheduler, A, ctx_size=2048) is first and machine.loads == ["a"]
    busy = await scheduler.acquire(A)
    served = await scheduler.acquire(A, ctx_size=8192)  # in flight: served with the loaded context
    assert served is first and machine.loads == ["a"]
    scheduler.release(busy)
    scheduler.release(served)
    larger = await use(scheduler, A, ctx_size=8192)
    assert larger is not first and machine.loads == ["a", "a"] and machine.unloads == ["a"]
    assert larger.backend.facts.n_ctx == 8192


async def test_a_closed_scheduler_refuses_requests_and_wakes_the_waiting() -> None:
    machine = Machine(ram=6 * GiB)
    scheduler = scheduler_on(machine)
    busy = await scheduler.acquire(A)
    waiting = asyncio.create_task(use(scheduler, B))
    await asyncio.sleep(0)
    runners = await scheduler.close()
    assert [r.name for r in runners] == ["a"]
    with pytest.raises(ServerShuttingDown):
        await waiting
    with pytest.raises(ServerShuttingDown):
        await scheduler.acquire(A)
    scheduler.release(busy)  # a request ending after the close changes nothing
