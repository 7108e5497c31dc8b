"""The job queue in front of the slots: no request is ever lost, and no slot idles while one waits.

The queue is the step loop's own (``JobQueue`` with real ``Slot`` and ``Job`` objects); only the decoding is
simulated: each turn every running job makes one token, and a job ends when it has made its ``max_tokens``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from localinfer.backends.llamacpp.dispatch import JobQueue
from localinfer.backends.llamacpp.job import Item, Job, Slot
from localinfer.backends.text_stream import TextStream
from localinfer.errors import GenerationFailed, ModelNotReady, QueueFull
from localinfer.types import TokenChunk


@dataclass
class Record:
    """What a requester saw of its job."""

    items: list[Item] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return any(isinstance(i, TokenChunk) and i.finish_reason is not None for i in self.items)

    @property
    def failed(self) -> bool:
        return any(isinstance(i, BaseException) for i in self.items)


class TrackedJob(Job):
    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


def new_job(index: int, length: int, record: Record, prompt: list[int] | None = None) -> TrackedJob:
    return TrackedJob(
        request_id=str(index),
        prompt=prompt if prompt is not None else [1, 2, index],
        sampler=None,
        max_tokens=length,
        ignore_eos=True,
        deliver=record.items.append,
        text=TextStream(()),
    )


class Decoder:
    """The step loop's part that the queue does not do: starting, decoding one token per turn, releasing."""

    def __init__(self, queue: JobQueue, slots: list[Slot]) -> None:
        self.queue = queue
        self.slots = slots
        self.started: list[Job] = []

    def start(self, slot: Slot, job: Job) -> None:
        assert slot.idle, "a job was started on a busy slot"
        slot.job = job
        slot.cached = list(job.prompt)
        self.started.append(job)

    def release(self, slot: Slot) -> None:
        assert slot.job is not None
        slot.job.close()
        slot.job = None

    def turn(self, before_step: Callable[[], None] = lambda: None) -> None:
        """One turn of the loop: take arrivals, dispatch, (``before_step``), decode one token for every busy
        slot."""
        assert self.queue.collect()
        self.queue.dispatch(self.start, self.release)
        before_step()
        for slot in self.slots:
            if slot.job is not None:
                self.advance(slot, slot.job)

    def advance(self, slot: Slot, job: Job) -> None:
        """One token for ``job``; released once it has made its ``max_tokens``."""
        job.generated += 1
        if job.reached_max_tokens():
            job.finish("length")
            self.release(slot)


class QueueMachine(RuleBasedStateMachine):
    """Random arrivals, lengths, cancellations and simultaneous finishes against one queue."""

    @initialize(n_slots=st.integers(1, 4), max_queue=st.integers(0, 6))
    def setup(self, n_slots: int, max_queue: int) -> None:
        self.slots = [Slot(seq_id=i) for i in range(n_slots)]
        self.queue = JobQueue(self.slots, max_queue=max_queue)
        self.max_queue = max_queue
        self.decoder = Decoder(self.queue, self.slots)
        self.records: dict[int, Record] = {}
        self.jobs: dict[int, TrackedJob] = {}
        self.refused: set[int] = set()
        self.uncollected = 0  # submitted since the last turn

    @rule(length=st.integers(1, 5), burst=st.integers(1, 8))
    def arrive(self, length: int, burst: int) -> None:
        """``burst`` requests of the same length at once (they then finish in the same turn)."""
        for _ in range(burst):
            index = len(self.records)
            record = self.records[index] = Record()
            job = self.jobs[index] = new_job(index, length, record)
            try:
                self.queue.submit(job)
            except QueueFull:
                self.refused.add(index)
            else:
                self.uncollected += 1

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(sorted(self.jobs)))
        self.jobs[index].cancelled = True

    def live(self) -> bool:
        """A job was admitted and is not done with (waiting, cancelled but not yet dropped, or running)."""
        return any(not job.closed for index, job in self.jobs.items() if index not in self.refused)

    @precondition(lambda self: self.uncollected > 0 or self.live())
    @rule()
    def turn(self) -> None:
        if not self.uncollected:  # the loop sleeps when the queue says there is no work: it must be right
            assert self.queue.has_work() == self.live(), "the loop would sleep with a request waiting"
        self.decoder.turn(before_step=self.check_before_step)
        self.uncollected = 0

    def check_before_step(self) -> None:
        assert self.queue.idle_slots() == 0 or self.queue.waiting == 0, "a slot idles while a request waits"
        assert self.queue.waiting <= self.max_queue

    @invariant()
    def admitted_jobs_fit(self) -> None:
        if hasattr(self, "queue"):
            busy = len(self.slots) - self.queue.idle_slots()
            assert busy + self.queue.waiting <= len(self.slots) + self.max_queue

    def teardown(self) -> None:
        if not hasattr(self, "queue"):
            return
        for _ in range(10_000):  # every job is at most 5 tokens long: this drains any queue the rules can build
            if not (self.uncollected or self.live()):
                break
            self.turn()
        assert not self.queue.has_work() and self.queue.waiting == 0
        for index, record in self.records.items():
            job = self.jobs[index]
            ended = index in self.refused or record.finished or job.cancelled
            assert ended, f"request {index} never ended"
            assert not record.failed
        started_order = [int(job.request_id) for job in self.decoder.started]
        assert started_order == sorted(started_order), "requests were not served in the order they arrived"


QueueMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_every_request_ends_and_no_slot_idles_while_one_waits = QueueMachine.TestCase


def test_a_burst_that_finishes_in_the_same_step_does_not_leave_the_rest_waiting() -> None:
    """The wedge: 8 equal requests on 4 slots; the first 4 finish together and the loop must not go to sleep
    with the other 4 waiting (it used to block on new arrivals because every slot was idle)."""
    slots = [Slot(seq_id=i) for i in range(4)]
    queue = JobQueue(slots, max_queue=64)
    decoder = Decoder(queue, slots)
    records = [Record() for _ in range(8)]
    for index, record in enumerate(records):
        queue.submit(new_job(index, 16, record))
    for _ in range(16):
        decoder.turn()
    assert all(r.finished for r in records[:4]) and all(slot.idle for slot in slots)
    assert queue.has_work(), "four requests wait: the loop has work"
    returned = threading.Event()

    def collect() -> None:
        queue.collect()
        returned.set()

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert returned.is_set(), "the loop went to sleep with requests waiting"
    for _ in range(16):
        decoder.turn()
    assert all(r.finished for r in records)


def test_the_queue_is_bounded_and_refuses_with_queue_full() -> None:
    slots = [Slot(seq_id=i) for i in range(2)]
    queue = JobQueue(slots, max_queue=3)
    for index in range(5):
        queue.submit(new_job(index, 4, Record()))
    refused = new_job(5, 4, Record())
    with pytest.raises(QueueFull, match="2 slots are busy and 5 requests are waiting"):
        queue.submit(refused)


def test_a_waiting_request_that_is_cancelled_leaves_the_queue_at_the_next_turn() -> None:
    slots = [Slot(seq_id=0)]
    queue = JobQueue(slots, max_queue=1)
    decoder = Decoder(queue, slots)
    queue.submit(new_job(0, 100, Record()))
    waiting = new_job(1, 100, Record())
    queue.submit(waiting)
    decoder.turn()
    assert queue.waiting == 1
    waiting.cancelled = True
    decoder.turn()
    assert queue.waiting == 0
    queue.submit(new_job(2, 100, Record()))  # its place is free again


def test_after_close_waiting_requests_fail_and_new_ones_are_refused() -> None:
    slots = [Slot(seq_id=0)]
    queue = JobQueue(slots, max_queue=4)
    decoder = Decoder(queue, slots)
    records = [Record() for _ in range(3)]
    for index, record in enumerate(records):
        queue.submit(new_job(index, 100, record))
    decoder.turn()
    queue.close(GenerationFailed("unloaded"))
    assert [r.failed for r in records] == [False, True, True]  # the running one is the loop's to fail
    assert queue.waiting == 0
    with pytest.raises(ModelNotReady):
        queue.submit(new_job(3, 1, Record()))


def test_a_start_that_raises_loses_no_request() -> None:
    """A bug while starting a job ends the loop; the job it was starting must still be failed, not lost."""
    slots = [Slot(seq_id=0)]
    queue = JobQueue(slots, max_queue=4)
    record = Record()
    queue.submit(new_job(0, 4, record))
    assert queue.collect()

    def broken_start(slot: Slot, job: Job) -> None:
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError):
        queue.dispatch(broken_start, lambda slot: None)
    queue.close(GenerationFailed("the inference loop stopped"))
    assert record.failed and queue.waiting == 0


def test_a_free_slot_goes_to_the_highest_priority_then_to_the_longest_waiting() -> None:
    """A keystroke's completion (high) goes ahead of queued chat (normal), chat ahead of batch work (low); within
    a priority, first come first served."""
    slots = [Slot(seq_id=0)]
    queue = JobQueue(slots, max_queue=16)
    decoder = Decoder(queue, slots)
    running = new_job(0, 1, Record())
    queue.submit(running)
    decoder.turn()  # the only slot is busy for this turn
    order = [("low", 0), ("normal", 1), ("normal", 1), ("high", 2), ("low", 0), ("high", 2)]
    jobs = []
    for index, (_, rank) in enumerate(order, start=1):
        job = new_job(index, 1, Record())
        job.priority = rank
        jobs.append(job)
        queue.submit(job)
    for _ in range(len(order)):
        decoder.turn()
    started = [job.request_id for job in decoder.started[1:]]
    assert started == ["4", "6", "2", "3", "1", "5"]


class PrefillDecoder(Decoder):
    """A decoder whose jobs first compute their prompt, ``chunk`` tokens a turn, then make one token a turn."""

    def __init__(self, queue: JobQueue, slots: list[Slot], chunk: int) -> None:
        super().__init__(queue, slots)
        self.chunk = chunk
        self.streaming: set[int] = set()  # jobs that have made a token: their slot must never be taken

    def start(self, slot: Slot, job: Job) -> None:
        assert slot.idle, "a job was started on a busy slot"
        assert id(job) not in self.streaming, "a job that was streaming was started again"
        slot.job = job
        slot.cached = []  # no prefix reuse here: every start computes its whole prompt
        slot.to_prefill = list(job.prompt)
        self.started.append(job)

    def advance(self, slot: Slot, job: Job) -> None:
        if slot.to_prefill:
            slot.cached += slot.to_prefill[: self.chunk]
            slot.to_prefill = slot.to_prefill[self.chunk :]
            return
        self.streaming.add(id(job))
        super().advance(slot, job)


def prioritised_job(index: int, rank: int, prompt_length: int, record: Record) -> TrackedJob:
    job = new_job(index, 2, record, prompt=list(range(prompt_length)))
    job.priority = rank
    return job


def test_a_keystroke_takes_the_slot_of_a_chat_prompt_still_being_computed() -> None:
    """The only slot is computing a long chat prompt; a keystroke's completion (high) arrives: at the next turn
    it has the slot, the chat waits first in line and starts again as soon as the slot is free. The chat yields
    once: the next keystroke waits for the chat (a stream of keystrokes cannot hold it back for ever)."""
    slots = [Slot(seq_id=0)]
    queue = JobQueue(slots, max_queue=8)
    decoder = PrefillDecoder(queue, slots, chunk=4)
    chat, later_chat = Record(), Record()
    chat_job = prioritised_job(0, 1, 40, chat)
    queue.submit(chat_job)
    decoder.turn()
    decoder.turn()  # 8 of its 40 prompt tokens computed
    keystroke = Record()
    queue.submit(prioritised_job(1, 2, 4, keystroke))
    queue.submit(prioritised_job(2, 1, 4, later_chat))  # arrived after the first chat: it starts after it
    decoder.turn()
    assert slots[0].job is not None and slots[0].job.request_id == "1"
    assert chat_job.yielded and not chat_job.closed and queue.waiting == 2
    for _ in range(3):
        decoder.turn()
    assert keystroke.finished
    decoder.turn()
    assert slots[0].job is chat_job, "the chat that yielded is first in line again"
    queue.submit(prioritised_job(3, 2, 4, Record()))
    decoder.turn()
    assert slots[0].job is chat_job, "a job yields once at most"
    while queue.has_work():
        decoder.turn()
    assert chat.finished and later_chat.finished
    assert [job.request_id for job in decoder.started] == ["0", "1", "0", "3", "2"]


def test_a_reply_already_streaming_never_yields_and_equal_priorities_never_take_a_slot() -> None:
    slots = [Slot(seq_id=0), Slot(seq_id=1)]
    queue = JobQueue(slots, max_queue=8)
    decoder = PrefillDecoder(queue, slots, chunk=100)
    streaming = prioritised_job(0, 0, 4, Record())
    streaming.max_tokens = 50
    queue.submit(streaming)
    decoder.turn()
    decoder.turn()  # prompt done, generating
    prefilling = prioritised_job(1, 1, 1000, Record())
    queue.submit(prefilling)
    decoder.turn()  # on the second slot, 100 of 1000 prompt tokens computed
    queue.submit(prioritised_job(2, 1, 4, Record()))  # same priority as the prompt being computed: waits
    decoder.turn()
    assert [slot.job for slot in slots] == [streaming, prefilling]
    queue.submit(prioritised_job(3, 2, 4, Record()))  # higher than both: takes the prompt's slot, not the stream's
    decoder.turn()
    assert slots[0].job is streaming and slots[1].job is not None and slots[1].job.request_id == "3"
    assert prefilling.yielded and not streaming.yielded


def test_a_prompt_more_than_half_computed_finishes_before_a_keystroke_gets_its_slot() -> None:
    """Yielding throws away what the prompt computed: past half of it, finishing costs less than starting over."""
    slots = [Slot(seq_id=0)]
    queue = JobQueue(slots, max_queue=8)
    decoder = PrefillDecoder(queue, slots, chunk=10)
    chat = prioritised_job(0, 1, 40, Record())
    queue.submit(chat)
    for _ in range(3):
        decoder.turn()  # 30 of its 40 prompt tokens computed
    queue.submit(prioritised_job(1, 2, 4, Record()))
    decoder.turn()
    assert slots[0].job is chat and not chat.yielded


@settings(max_examples=200, deadline=None)
@given(
    arrivals=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2), st.integers(1, 30)), min_size=1, max_size=16),
    n_slots=st.integers(1, 3),
)
def test_with_priorities_every_request_ends_and_none_yields_twice(
    arrivals: list[tuple[int, int, int]], n_slots: int
) -> None:
    """Random arrivals (turn, priority, prompt length): every request ends, a streaming reply keeps its slot
    (checked by the decoder), no job yields twice, and a slot never idles while a request waits."""
    slots = [Slot(seq_id=i) for i in range(n_slots)]
    queue = JobQueue(slots, max_queue=64)
    decoder = PrefillDecoder(queue, slots, chunk=4)
    records: list[Record] = []
    jobs: list[TrackedJob] = []
    starts: dict[int, int] = {}

    def check() -> None:
        assert queue.idle_slots() == 0 or queue.waiting == 0, "a slot idles while a request waits"

    for turn in range(400):
        arriving = [(index, rank, length) for index, (at, rank, length) in enumerate(arrivals) if at == turn]
        for index, rank, length in arriving:
            records.append(Record())
            jobs.append(prioritised_job(index, rank, length, records[-1]))
            queue.submit(jobs[-1])
        if arriving or queue.has_work():  # else the loop would sleep until a request arrives
            decoder.turn(before_step=check)
    assert all(record.finished for record in records)
    for job in decoder.started:
        starts[id(job)] = starts.get(id(job), 0) + 1
    assert all(count <= 2 for count in starts.values()), "a job yielded twice"
