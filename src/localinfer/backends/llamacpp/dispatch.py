"""Who waits and who runs: the one place that hands free slots to waiting jobs.

Requesters ``submit`` jobs from any thread; everything else runs on the inference thread, once per turn of the
step loop: ``collect`` takes what arrived (sleeping only when no slot is busy and no job waits, so a job can never
be left waiting by a sleeping loop), then ``dispatch`` drops cancelled jobs and gives every free slot to the job
of the highest priority that has waited longest (a keystroke's completion before queued chat, chat before batch
work). When no slot is free, a job of higher priority takes the slot of one still computing its prompt (less than
half computed), which yields between two steps (a step computes one micro-batch of prompt) and goes back in line.
Because ``dispatch`` runs after every step, whatever finished, was cancelled or arrived in between, a slot never
idles while a job waits.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from localinfer.backends.llamacpp.job import Job, Slot, common_prefix
from localinfer.errors import GenerationFailed, ModelNotReady, QueueFull

# Waking from idle, the loop gathers requests that arrive within GATHER_GAP of each other, for GATHER_MAX at most,
# so that clients that start together are prefilled in one batch instead of queueing behind the first one's prompt.
GATHER_GAP = 0.005
GATHER_MAX = 0.02


class _Wake:
    """What ``wake`` puts in the queue: no job, only a reason to look at work other than jobs."""


_WAKE = _Wake()

Start = Callable[[Slot, Job], None]
Release = Callable[[Slot], None]
Affinity = Callable[[Slot, list[int]], int]  # how many of a prompt's tokens a slot's cache serves


def prefix_affinity(slot: Slot, prompt: list[int]) -> int:
    """The tokens of ``prompt`` that ``slot``'s cache serves as its prefix."""
    return common_prefix(slot.cached, prompt)


class JobQueue:
    """A bounded queue of jobs in front of ``slots``: at most ``max_queue`` wait while every slot is busy."""

    def __init__(self, slots: Sequence[Slot], *, max_queue: int, affinity: Affinity = prefix_affinity) -> None:
        """``affinity``: how many of a prompt's tokens a slot's cache serves (its prefix, and what it would move);
        a job goes to the free slot that serves most."""
        self._slots = slots
        self._max_queue = max_queue
        self._affinity = affinity
        self._incoming: queue.SimpleQueue[Job | _Wake | None] = queue.SimpleQueue()
        self._waiting: deque[Job] = deque()
        self._lock = threading.Lock()
        self._pending = 0  # submitted and neither in a slot nor dropped; guarded by _lock
        self._closed = False  # no more submissions: the loop has ended; guarded by _lock
        self._stopping = False

    # --- any thread ---------------------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job``. Raises QueueFull, and closes the job, when every slot is busy and ``max_queue`` jobs
        already wait, and ModelNotReady once the loop has ended."""
        with self._lock:
            if self._closed:
                job.close()
                raise ModelNotReady("the model was unloaded", hint="retry: it is loaded again on the next request")
            if self._pending >= self._max_queue + self.idle_slots():
                waiting = self._pending
                job.close()
                raise QueueFull(
                    f"all {len(self._slots)} slots are busy and {waiting} requests are waiting",
                    hint="retry shortly, or start the server with more --parallel slots or a larger --max-queue",
                )
            self._pending += 1
        self._incoming.put(job)

    def stop(self) -> None:
        """Wake the loop and make ``collect`` return False."""
        self._incoming.put(None)

    def wake(self) -> None:
        """Make a sleeping ``collect`` return (work other than a job came: a slot's save or restore)."""
        self._incoming.put(_WAKE)

    def idle_slots(self) -> int:
        return sum(1 for slot in self._slots if slot.idle)

    @property
    def waiting(self) -> int:
        """Jobs submitted and not yet given a slot (cancelled ones until the next ``dispatch`` drops them)."""
        return self._pending

    # --- the inference thread -----------------------------------------------------------------------------

    def has_work(self) -> bool:
        """A slot is busy or a job waits: the loop must step or dispatch rather than sleep."""
        return bool(self._waiting) or any(not slot.idle for slot in self._slots)

    def collect(self) -> bool:
        """Move submitted jobs to the waiting line, sleeping for the first one only when there is no work.

        Returns False once ``stop`` was called: the loop should end.
        """
        block = not self.has_work()
        try:
            item = self._incoming.get(block=block)
        except queue.Empty:
            return not self._stopping
        deadline = time.perf_counter() + GATHER_MAX
        while True:
            if item is None:
                self._stopping = True
            elif isinstance(item, Job):
                self._waiting.append(item)
            wait = min(GATHER_GAP, deadline - time.perf_counter()) if block else 0.0
            try:
                item = self._incoming.get(timeout=wait) if wait > 0 else self._incoming.get_nowait()
            except queue.Empty:
                return not self._stopping

    def dispatch(self, start: Start, release: Release) -> None:
        """Drop cancelled jobs (waiting ones are closed, running ones ``release``d), then ``start`` the longest
        waiting job of the highest priority on the free slot whose cache shares the longest prefix with its
        prompt, while both remain."""
        for job in [job for job in self._waiting if job.cancelled]:
            self._waiting.remove(job)
            self._left_queue()
            job.close()
        for slot in self._slots:
            if slot.job is not None and slot.job.cancelled:
                release(slot)
        while self._waiting:
            top = max(job.priority for job in self._waiting)
            free = [slot for slot in self._slots if slot.idle]
            if not free:
                yielding = self._slot_to_yield(top)
                if yielding is None:
                    return
                self._waiting.appendleft(yielding.yield_job())  # first in line of its priority
                with self._lock:
                    self._pending += 1
                free = [yielding]
            job = next(job for job in self._waiting if job.priority == top)
            best = (
                free[0] if len(free) == 1 else max(free, key=lambda s: (self._affinity(s, job.prompt), -len(s.cached)))
            )
            start(best, job)
            self._waiting.remove(job)  # only once started: a start that raises leaves it in line, for close()
            self._left_queue()

    def _slot_to_yield(self, priority: int) -> Slot | None:
        """The slot a job of ``priority`` may take when none is free: one still computing the prompt of a job of
        lower priority that has computed less of it than is left (the lowest priority, then the least computed),
        so little work is lost. That job goes back first in line and computes its prompt again, less what it
        still shares with what its slot then caches. A job yields once at most; a job that is generating never
        yields (its reply is already streaming)."""
        candidates = [
            slot
            for slot in self._slots
            if slot.job is not None
            and slot.job.priority < priority
            and slot.to_prefill
            and slot.next_token is None
            and not slot.job.yielded
            and _computed(slot) < len(slot.to_prefill)
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda s: (s.job.priority if s.job is not None else 0, _computed(s)))

    def close(self, error: GenerationFailed) -> None:
        """Refuse submissions from now on; fail and close every job that has no slot yet, arriving ones included."""
        with self._lock:
            self._closed = True
        while True:
            try:
                item = self._incoming.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Job):
                self._waiting.append(item)
        while self._waiting:
            job = self._waiting.popleft()
            self._left_queue()
            job.fail(error)
            job.close()

    def _left_queue(self) -> None:
        with self._lock:
            self._pending -= 1


def _computed(slot: Slot) -> int:
    """Prompt tokens the slot's job has computed itself (beyond the prefix it found cached)."""
    return len(slot.cached) - (slot.job.cached_tokens if slot.job is not None else 0)
