"""Which models are in memory: the one place that loads, keeps alive and evicts them.

A request names a model; ``Scheduler.acquire`` hands back its ready runner and counts the request in flight until
``release``. A model not loaded is loaded, after evicting what must go for it to fit: idle models, least recently
used first, never a pinned one and never one with requests in flight (the new request waits for those to finish).
Two requests for a model being loaded share the one load. A model that cannot fit even with every other evictable
model gone is refused with what it needs and what is free. A failed load leaves the other models serving.

Memory is accounted per device ("ram", "cuda:0", ...): each model's estimate (weights + KV cache + compute, from
the hardware planner) against what the machine has free now, less the estimates of loads under way (their memory
is not taken yet). When a request ends and its model is idle, the model's keep-alive starts: it is unloaded once
that much time has passed without a request (Ollama's ``keep_alive``: 5 minutes by default, 0 unloads at once, a
negative one keeps it while the server runs; the last request's keep-alive is the model's). Pinned models never
expire.

The clock, the memory probe, the estimate and the loading itself are injected, so the unit tests drive it with
fakes and a clock they move by hand (``reap`` unloads what has expired by the clock; ``run_reaper`` calls it as
time passes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from localinfer.backends.base import Backend
from localinfer.defaults import KEEP_ALIVE_SECONDS
from localinfer.errors import ModelLoadError, ServerShuttingDown
from localinfer.models.store import Manifest

if TYPE_CHECKING:
    from localinfer.engine.templates import Template

log = logging.getLogger(__name__)

DEFAULT_KEEP_ALIVE = KEEP_ALIVE_SECONDS  # the keep_alive setting's default, for a scheduler built without it

Need = Mapping[str, int]  # bytes per device
MemoryProbe = Callable[[Iterable[str]], Mapping[str, int]]  # free bytes now of (at least) the devices asked
Clock = Callable[[], float]  # seconds, monotonic
Estimate = Callable[[Manifest, "int | None"], Need]  # what a model loaded with a context of that many tokens takes
Loader = Callable[["Runner"], Awaitable[None]]  # loads the runner's backend (and its template); raises on failure
Unloader = Callable[["Runner"], Awaitable[None]]


class ModelTooLarge(ModelLoadError):
    """A model that does not fit in memory even with every evictable model unloaded."""


@dataclass(eq=False)
class Runner:
    """A model being loaded or loaded: its manifest, backend, (once loaded) its chat template, and what the
    scheduler keeps about it."""

    manifest: Manifest
    backend: Backend
    ready: asyncio.Future[None]
    ctx_size: int | None = None  # the context asked for at load, None for the configured one
    template: Template | None = None
    need: Need = field(default_factory=dict)
    pinned: bool = False
    keep_alive: float | None = DEFAULT_KEEP_ALIVE  # seconds; None: kept while the server runs
    in_flight: int = 0
    last_used: float = 0.0
    expires_at: float | None = None  # by the scheduler's clock; None while in use, pinned or kept for good

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def is_ready(self) -> bool:
        """Loaded, and not failed or cancelled."""
        return self.ready.done() and not self.ready.cancelled() and self.ready.exception() is None


def keep_alive_seconds(value: float | None, default: float | None) -> float | None:
    """A request's keep-alive in seconds as the scheduler keeps it: ``default`` when the request gives none, None
    (kept for good) for a negative one."""
    if value is None:
        return default
    return None if value < 0 else value


class Scheduler:
    def __init__(
        self,
        new_runner: Callable[[Manifest, int | None], Runner],
        load: Loader,
        unload: Unloader,
        *,
        estimate: Estimate,
        free_memory: MemoryProbe,
        clock: Clock = time.monotonic,
        max_loaded: int = 0,
        keep_alive: float | None = DEFAULT_KEEP_ALIVE,
    ) -> None:
        """``new_runner`` makes a runner (not loaded) for a manifest and context; ``load`` and ``unload`` load and
        free its backend. ``max_loaded`` 0: as many as fit. ``keep_alive``: the default, in seconds (None: for
        good)."""
        self._new_runner = new_runner
        self._load = load
        self._unload = unload
        self._estimate = estimate
        self._free_memory = free_memory
        self._clock = clock
        self.max_loaded = max_loaded
        self.keep_alive = keep_alive
        self._runners: dict[str, Runner] = {}
        self._unloading: dict[str, asyncio.Task[None]] = {}
        self._loading: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()  # set when a model becomes idle, unloads or fails: waiters look again
        self._closed = False

    # --- what is loaded ---------------------------------------------------------------------------------------

    def get(self, name: str) -> Runner | None:
        """The runner of ``name`` when it is loaded or loading."""
        return self._runners.get(name)

    def runners(self) -> list[Runner]:
        return list(self._runners.values())

    def is_loading(self) -> bool:
        return any(not r.ready.done() for r in self._runners.values())

    # --- acquire and release ----------------------------------------------------------------------------------

    async def acquire(
        self,
        manifest: Manifest | Callable[[], Manifest],
        *,
        ctx_size: int | None = None,
        keep_alive: float | None = None,
        pin: bool = False,
    ) -> Runner:
        """``manifest``'s ready runner, loaded first when it is not, counted in flight until ``release``. A
        callable ``manifest`` is asked each time the model is to be loaded (after waiting for room or for its own
        unload, it may be gone), and may raise.

        ``keep_alive`` (seconds; negative: for good) becomes the model's from this request on; None, the
        model keeps its own (the default for a model this request loads). A ``ctx_size`` larger than the loaded
        context reloads the model when no request is in flight, and is served with the loaded one otherwise; a
        smaller one never reloads. Raises ServerShuttingDown, ModelTooLarge and what loading raises."""
        resolve = manifest if callable(manifest) else (lambda: manifest)
        name = resolve().name
        while True:
            if self._closed:
                raise ServerShuttingDown()
            if name in self._unloading:
                await asyncio.shield(self._unloading[name])
                continue
            runner = self._runners.get(name)
            if runner is not None and runner.is_ready and self._wants_larger_context(runner, ctx_size):
                self._start_unload(runner)
                continue
            if runner is None:
                runner = await self._make_room_and_start(resolve(), ctx_size)
                if runner is None:
                    continue  # waited for memory to free: look again
            runner.in_flight += 1
            runner.expires_at = None
            if pin:
                runner.pinned = True
            if keep_alive is not None:
                runner.keep_alive = keep_alive_seconds(keep_alive, self.keep_alive)
            try:
                await asyncio.shield(runner.ready)
            except BaseException:
                self._forget_request(runner)
                raise
            return runner

    def release(self, runner: Runner) -> None:
        """A request on ``runner`` ended: when none is left in flight, its keep-alive starts (0: unloaded now)."""
        self._forget_request(runner)

    def _forget_request(self, runner: Runner) -> None:
        runner.in_flight -= 1
        runner.last_used = self._clock()
        if runner.in_flight > 0 or self._runners.get(runner.name) is not runner:
            return
        if runner.pinned or runner.keep_alive is None:
            runner.expires_at = None
        elif runner.keep_alive <= 0:
            runner.expires_at = runner.last_used
            if runner.is_ready:
                self._start_unload(runner)
        else:
            runner.expires_at = runner.last_used + runner.keep_alive
        self._changed.set()

    def _wants_larger_context(self, runner: Runner, ctx_size: int | None) -> bool:
        if not ctx_size or runner.in_flight > 0 or runner.pinned:
            return False
        loaded = runner.backend.facts.n_ctx
        return ctx_size > loaded and (runner.ctx_size or 0) != ctx_size

    # --- memory ---------------------------------------------------------------------------------------------

    async def _make_room_and_start(self, manifest: Manifest, ctx_size: int | None) -> Runner | None:
        """Start loading ``manifest`` once it fits, evicting idle models for it; None after waiting for a change
        (a request finished, a model unloaded), for the caller to look again."""
        need = self._estimate(manifest, ctx_size)
        victims = self._victims(manifest.name, need)
        if victims is None:
            self._changed.clear()
            await self._changed.wait()
            return None
        if victims:
            for victim in victims:
                log.info("unloading %s to make room for %s", victim.name, manifest.name)
                self._start_unload(victim)
            await asyncio.gather(
                *(asyncio.shield(self._unloading[v.name]) for v in victims if v.name in self._unloading)
            )
            return None
        if manifest.name in self._runners or manifest.name in self._unloading:
            return None  # another request started it while this one waited
        return self._start_loading(manifest, ctx_size, need)

    def _victims(self, name: str, need: Need) -> list[Runner] | None:
        """The idle models to unload (least recently used first) so that a model needing ``need`` fits and the
        count stays within ``max_loaded``: [] when it fits now; None when it would fit once requests in flight
        finish. Raises ModelTooLarge when it cannot fit even then."""
        free = self._free_now(need)
        others = [r for r in self._runners.values() if r.name != name]
        idle = sorted(
            (r for r in others if not r.pinned and r.in_flight == 0 and r.ready.done()), key=lambda r: r.last_used
        )
        evictable = [r for r in others if not r.pinned]
        chosen: list[Runner] = []
        for candidate in [None, *idle]:
            if candidate is not None:
                chosen.append(candidate)
                free = _plus(free, candidate.need)
            if _fits(need, free) and self._count_fits(len(others) - len(chosen)):
                return chosen
        # not with every idle model gone: with the busy ones too, once their requests end?
        everything = _plus(free, *(r.need for r in evictable if r not in chosen))
        if _fits(need, everything) and self._count_fits(len(others) - len(evictable)):
            return None
        if not self._count_fits(len(others) - len(evictable)):
            raise ModelLoadError(
                f"cannot load '{name}': {len(others)} models are pinned and at most {self.max_loaded} may be loaded",
                hint="raise --max-loaded, or pin fewer models",
            )
        raise ModelTooLarge(
            f"model '{name}' needs {_describe(need)} but {_describe(everything, need)} "
            + ("is free with every unpinned model unloaded" if evictable else "is free"),
            hint="free memory, pick a smaller quantization, or load it with a shorter context (--ctx-size)",
        )

    def _count_fits(self, others: int) -> bool:
        return self.max_loaded <= 0 or others + 1 <= self.max_loaded

    def _free_now(self, need: Need) -> dict[str, int]:
        """What is free per device, less what loads under way will take (their memory is not taken yet)."""
        free = dict(self._free_memory(need.keys()))
        for runner in self._runners.values():
            if not runner.ready.done():
                for device, size in runner.need.items():
                    free[device] = free.get(device, 0) - size
        return free

    # --- loading and unloading ----------------------------------------------------------------------------------

    async def _load_runner(self, runner: Runner) -> None:
        try:
            await self._load(runner)
            runner.ready.set_result(None)
        except asyncio.CancelledError:
            self._drop(runner)
            runner.ready.cancel()
            raise
        except Exception as exc:
            log.error("loading %s failed: %s", runner.name, exc)
            self._drop(runner)
            runner.ready.set_exception(exc)
            runner.ready.exception()  # marked retrieved: nobody may be waiting
        if runner.is_ready and runner.in_flight == 0 and self._runners.get(runner.name) is runner:
            # loaded ahead of any request (a pin, a preload): its keep-alive starts now
            runner.in_flight = 1
            self._forget_request(runner)

    def _drop(self, runner: Runner) -> None:
        if self._runners.get(runner.name) is runner:
            del self._runners[runner.name]
        self._changed.set()

    def start(self, manifest: Manifest, *, ctx_size: int | None = None, pin: bool = False) -> Runner:
        """Start loading ``manifest`` now without waiting (a preload or a pin), whatever memory says; the runner
        loading or loaded already when there is one."""
        runner = self._runners.get(manifest.name)
        if runner is None:
            runner = self._start_loading(manifest, ctx_size, self._estimate(manifest, ctx_size))
        if pin:
            runner.pinned = True
            runner.expires_at = None
        return runner

    def _start_loading(self, manifest: Manifest, ctx_size: int | None, need: Need) -> Runner:
        """A new runner for ``manifest``, taking ``need``, listed as loading while its load runs in a task."""
        runner = self._new_runner(manifest, ctx_size)
        runner.need = dict(need)
        runner.keep_alive = self.keep_alive
        runner.last_used = self._clock()
        self._runners[manifest.name] = runner
        task = asyncio.create_task(self._load_runner(runner), name=f"load {manifest.name}")
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)
        return runner

    def _start_unload(self, runner: Runner) -> None:
        if self._runners.get(runner.name) is not runner or runner.name in self._unloading:
            return
        del self._runners[runner.name]
        task = asyncio.create_task(self._unload_runner(runner), name=f"unload {runner.name}")
        self._unloading[runner.name] = task

    async def _unload_runner(self, runner: Runner) -> None:
        try:
            if not runner.ready.done():
                await asyncio.wait([runner.ready])
            if runner.is_ready:
                await self._unload(runner)
        except Exception as exc:  # an unload that fails must not stop the others
            log.warning("unloading %s failed: %s", runner.name, exc)
        finally:
            self._unloading.pop(runner.name, None)
            self._changed.set()

    async def unload(self, name: str) -> bool:
        """Unload ``name`` now (False when it was not loaded or loading); requests in flight end with an error."""
        runner = self._runners.get(name)
        if runner is None:
            task = self._unloading.get(name)
            if task is not None:
                await asyncio.shield(task)
            return False
        self._start_unload(runner)
        await asyncio.shield(self._unloading[name])
        return True

    def unload_when_idle(self, name: str) -> bool:
        """Unload ``name`` once its requests in flight have ended (at once when there are none), as Ollama's
        ``keep_alive: 0``; False when it is not loaded."""
        runner = self._runners.get(name)
        if runner is None:
            return False
        runner.keep_alive = 0
        runner.pinned = False
        if runner.in_flight == 0:
            runner.in_flight = 1
            self._forget_request(runner)
        return True

    # --- keep-alive -----------------------------------------------------------------------------------------

    def reap(self) -> list[str]:
        """Start unloading every idle model whose keep-alive has run out by the clock; their names."""
        now = self._clock()
        expired = [
            r
            for r in self._runners.values()
            if r.is_ready and r.in_flight == 0 and r.expires_at is not None and r.expires_at <= now
        ]
        for runner in expired:
            log.info("unloading %s: idle for its keep-alive (%ss)", runner.name, runner.keep_alive)
            self._start_unload(runner)
        return [r.name for r in expired]

    def expires_in(self, runner: Runner) -> float | None:
        """Seconds until ``runner``'s keep-alive unloads it; None while in use, pinned or kept for good."""
        if runner.expires_at is None or runner.in_flight > 0:
            return None
        return max(0.0, runner.expires_at - self._clock())

    def next_expiry(self) -> float | None:
        times = [r.expires_at for r in self._runners.values() if r.expires_at is not None and r.in_flight == 0]
        return min(times) if times else None

    async def run_reaper(self, *, most_wait: float = 1.0) -> None:
        """Unload expired models as time passes, until cancelled (the real clock; at least once a second)."""
        while True:
            self.reap()
            expiry = self.next_expiry()
            wait = most_wait if expiry is None else min(most_wait, max(0.0, expiry - self._clock()))
            await asyncio.sleep(max(wait, 0.01))

    async def wait_unloads(self) -> None:
        """Wait for the unloads under way."""
        while self._unloading:
            await asyncio.gather(*(asyncio.shield(t) for t in list(self._unloading.values())))

    async def close(self) -> list[Runner]:
        """Refuse new requests; the runners loaded (or loading) now, forgotten, for the caller to unload."""
        self._closed = True
        runners, self._runners = list(self._runners.values()), {}
        await self.wait_unloads()
        self._changed.set()
        return runners


def _plus(free: Mapping[str, int], *needs: Mapping[str, int]) -> dict[str, int]:
    total = dict(free)
    for need in needs:
        for device, size in need.items():
            total[device] = total.get(device, 0) + size
    return total


def _fits(need: Need, free: Mapping[str, int]) -> bool:
    return all(size <= free.get(device, 0) for device, size in need.items())


def _describe(sizes: Mapping[str, int], only: Iterable[str] | None = None) -> str:
    devices = list(only) if only is not None else list(sizes)
    return ", ".join(f"{sizes.get(d, 0) / 2**30:.1f} GiB of {'RAM' if d == 'ram' else d}" for d in devices)
