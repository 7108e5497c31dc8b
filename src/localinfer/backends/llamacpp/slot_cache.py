"""The slots' KV caches: what of a new prompt each slot's cache already holds, and making it hold that before the
rest is computed. Only the inference thread (step_loop.py) calls it.

Each slot has KV cells of its own, a whole context long. A job goes to the free slot whose cache serves most of its
prompt (``SlotCache.served``); when another slot's cache (busy or not) shares a much longer prefix, it is copied
into the job's slot first. A sliding-window cache that has moved past the shared prefix is rewound to the slot's
checkpoint where one serves. Past the shared prefix, the runs of the cache that the prompt has again are moved to
their new positions rather than computed (kv_shift.py); a full context is shifted to make room (llama-server's
context shift). Only the rest of the prompt is computed.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import llama_cpp.llama_cpp as lc

from localinfer.backends.llamacpp import checkpoints
from localinfer.backends.llamacpp.job import Job, Slot, common_prefix
from localinfer.backends.llamacpp.kv_shift import Run, can_shift, reuse_plan
from localinfer.backends.llamacpp.model import LlamaModel

log = logging.getLogger(__name__)

# A prompt takes its prefix from another slot's cache only when that saves computing this many tokens or more:
# the copy moves a whole context's keys and values (tens of MiB for a small model).
MIN_SHARED_PREFIX = 256


class Reused(NamedTuple):
    """What of a prompt a slot's cache holds once ``SlotCache.take`` is done: its first ``kept`` tokens (of which
    ``shared`` were copied from another slot), and ``shifted`` more, moved to their new positions."""

    kept: int
    shared: int
    shifted: int


class SlotCache:
    def __init__(self, model: LlamaModel, slots: list[Slot]) -> None:
        """The caches of ``slots``, in the context of the loaded ``model``; runs are moved when the model's
        ``cache_reuse`` asks and its memory can shift."""
        assert model.ctx is not None, "the slot cache needs a loaded model"
        self._model = model
        self._slots = slots
        self._ctx: lc.llama_context_p = model.ctx
        self._memory = lc.llama_get_memory(self._ctx)
        self._n_swa = model.n_swa
        self._add_bos = int(lc.llama_vocab_get_add_bos(model.vocab))
        refused = can_shift(self._memory, self._n_swa) if model.cache_reuse > 0 else None
        if refused is not None:
            log.info("cache reuse by shifting is off for this model: %s", refused)
        self._reuse_min = model.cache_reuse if refused is None else 0
        self._scratch = model.scratch_seq if self._reuse_min else -1

    def take(self, slot: Slot, job: Job) -> Reused:
        """Make ``slot``'s cache hold the longest cached prefix of ``job``'s prompt (unless the request opted out),
        from its own cache or another slot's, then the runs after it that the prompt has again; the rest of the
        prompt is left to compute (``slot.to_prefill``), at least its last token."""
        if slot.lora != job.lora:  # its cache was computed with other adapters or scales: none of it serves
            self.clear(slot)
            slot.lora = job.lora
        reuse = min(common_prefix(slot.cached, job.prompt), len(job.prompt) - 1) if job.cache_prompt else 0
        if job.media is not None:  # a picture is decoded whole
            reuse = job.media.align(job.prompt, reuse)
        shared = self._borrow_prefix(slot, job.prompt, reuse) if job.cache_prompt else 0
        if shared:
            reuse = shared
        elif self._n_swa and reuse > 0:
            reuse = self._rewind_window(slot, reuse)
        if self._scratch >= 0:  # runs a job left there unplaced (it ended or yielded mid-prompt)
            lc.llama_memory_seq_rm(self._memory, self._scratch, -1, -1)
            slot.pending, slot.shift = [], 0
        runs = self._runs(slot, job.prompt, reuse) if job.cache_prompt and not shared else []
        if runs:
            self._place(slot, job.prompt, reuse, runs)
        else:
            if not lc.llama_memory_seq_rm(self._memory, slot.seq_id, reuse, -1):
                self.clear(slot)
                reuse = 0
            slot.cached = slot.cached[:reuse]
            slot.to_prefill = job.prompt[reuse:]
        if slot.checkpoint is not None and slot.checkpoint.n_tokens > reuse:
            slot.checkpoint = None  # it holds a window of tokens that are about to be replaced
        return Reused(reuse, shared, sum(run.length for run in runs))

    def served(self, slot: Slot, prompt: list[int]) -> int:
        """How many of ``prompt``'s tokens ``slot``'s cache serves: its prefix, and the runs it would move."""
        prefix = common_prefix(slot.cached, prompt)
        return prefix + sum(run.length for run in self._runs(slot, prompt, min(prefix, len(prompt) - 1)))

    def clear(self, slot: Slot) -> None:
        """Empty ``slot``'s cache."""
        lc.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
        slot.cached = []
        slot.checkpoint = None

    def _runs(self, slot: Slot, prompt: list[int], reuse: int) -> list[Run]:
        """The runs of ``slot``'s cache past the ``reuse`` tokens it shares with ``prompt`` that ``prompt`` has
        again (kv_shift.py): after new tokens too where a scratch sequence can hold them meanwhile."""
        if self._reuse_min <= 0:
            return []
        return reuse_plan(slot.cached, prompt, reuse, self._reuse_min, inserts=self._scratch >= 0)

    def _place(self, slot: Slot, prompt: list[int], start: int, runs: list[Run]) -> None:
        """Move ``runs`` of ``slot``'s cache to where ``prompt`` has them, keeping its first ``start`` tokens; what
        lies between is computed. In a stream of its own, each run moves back right after the last, as
        llama-server moves them; with a scratch sequence, the runs wait there and each is put back once the tokens
        before it are computed (``put_back``)."""
        memory, seq = self._memory, slot.seq_id
        if self._scratch < 0:
            head = start
            for run in runs:  # each run's target is ``head``: reuse_plan without inserts
                lc.llama_memory_seq_rm(memory, seq, head, run.source)
                lc.llama_memory_seq_add(memory, seq, run.source, run.source + run.length, run.shift)
                head = run.target + run.length
            lc.llama_memory_seq_rm(memory, seq, head, -1)
            slot.cached, slot.to_prefill = prompt[:head], prompt[head:]
            return
        for run in runs:
            lc.llama_memory_seq_cp(memory, seq, self._scratch, run.source, run.source + run.length)
        lc.llama_memory_seq_rm(memory, seq, start, -1)
        slot.cached, slot.to_prefill = prompt[:start], prompt[start : runs[0].target]
        nexts = [*(run.target for run in runs[1:]), len(prompt)]  # where the tokens after each run end
        slot.pending = [(run, prompt[run.target + run.length : end]) for run, end in zip(runs, nexts, strict=True)]
        slot.shift = 0
        self.put_back(slot, prompt)

    def put_back(self, slot: Slot, prompt: list[int]) -> None:
        """Put back into ``slot``'s sequence the waiting runs that nothing is to be computed before any more: each
        moved to its place (with every run after it, so none overlaps another in the scratch sequence) and handed
        over; the tokens after it are computed next."""
        memory = self._memory
        while not slot.to_prefill and slot.pending:
            run, after = slot.pending.pop(0)
            assert len(slot.cached) == run.target, "a run goes back right after what is computed"
            moved = run.target - (run.source + slot.shift)
            if moved:
                lc.llama_memory_seq_add(memory, self._scratch, run.source + slot.shift, -1, moved)
                slot.shift += moved
            lc.llama_memory_seq_cp(memory, self._scratch, slot.seq_id, run.target, run.target + run.length)
            lc.llama_memory_seq_rm(memory, self._scratch, run.target, run.target + run.length)
            slot.cached.extend(prompt[run.target : run.target + run.length])
            slot.to_prefill = after

    def shift_context(self, slot: Slot, job: Job) -> None:
        """Make room in a full context (llama-server's context shift): drop the older half of what follows the
        request's first ``n_keep`` tokens and move the rest back; the generation goes on."""
        keep = (job.n_keep if job.n_keep >= 0 else len(job.prompt)) + self._add_bos  # as llama-server counts it
        keep = min(self._model.n_ctx - 4, keep)
        left = len(slot.cached) - keep
        discard = min(max(left // 2, 0), max(0, left - 1))
        memory, seq = self._memory, slot.seq_id
        lc.llama_memory_seq_rm(memory, seq, keep, keep + discard)
        lc.llama_memory_seq_add(memory, seq, keep + discard, -1, -discard)
        del slot.cached[keep : keep + discard]
        job.speculation = None  # its source no longer lines up with the cache
        job.context_shifts += 1
        log.debug("request %s: context shifted, %d tokens dropped after the first %d", job.request_id, discard, keep)

    def _borrow_prefix(self, slot: Slot, prompt: list[int], reuse: int) -> int:
        """Copy into ``slot`` the cache of another slot that holds a longer prefix of ``prompt`` (by at least
        MIN_SHARED_PREFIX tokens: the copy moves a whole context's cache), so a system prompt or a file computed
        for one conversation serves every slot. Returns the prefix length copied, 0 when none was."""
        best, best_n = None, reuse + MIN_SHARED_PREFIX - 1
        for other in self._slots:
            n = min(common_prefix(other.cached, prompt), len(prompt) - 1) if other is not slot else 0
            n = n if other.lora == slot.lora else 0  # computed with other adapters' scales
            if n > best_n and (not self._n_swa or self._window_holds(other, n)):
                best, best_n = other, n
        if best is None:
            return 0
        # Each slot's cache is a stream of its own, so llama.cpp copies the whole stream (at the next decode)
        # and the tail beyond the prefix is then dropped.
        lc.llama_memory_seq_cp(self._memory, best.seq_id, slot.seq_id, -1, -1)
        lc.llama_memory_seq_rm(self._memory, slot.seq_id, best_n, -1)
        slot.cached = best.cached[:best_n]
        slot.checkpoint = None
        return best_n

    def _window_holds(self, slot: Slot, n: int) -> bool:
        """A sliding-window cache still holds what the token after the first ``n`` of ``slot`` attends to."""
        pos_min = int(lc.llama_memory_seq_pos_min(self._memory, slot.seq_id))
        return pos_min == 0 or 0 <= pos_min < n - self._n_swa

    def _rewind_window(self, slot: Slot, reuse: int) -> int:
        """How much of the prefix a sliding-window cache still covers, restoring the slot's checkpoint if the
        window has moved past it; 0 when neither serves."""
        pos_min = lc.llama_memory_seq_pos_min(self._memory, slot.seq_id)
        if pos_min < 0:
            return 0  # nothing cached
        if self._window_holds(slot, reuse):
            return reuse  # the window still holds everything the next token attends to
        ckpt = slot.checkpoint
        if ckpt is not None and ckpt.n_tokens <= reuse and checkpoints.restore(self._ctx, slot.seq_id, ckpt):
            return ckpt.n_tokens
        return 0
