"""The inference thread: one step loop over the context's slots.

Each step builds one batch: the pending token of every generating slot (followed by a draft of the tokens likely
to come after it, when speculating: speculative.py), then chunks of prompt for prefilling slots, runs one
``llama_decode``, then each slot samples its own next token with its own sampler, and goes on through its draft
while the sampler picks the drafted tokens. New jobs join at the next step. Only this thread touches the
llama.cpp context.

Each slot has KV cells of its own, a whole context long. A job goes to the free slot whose cache serves most of its
prompt, and only the rest of the prompt is computed: what each slot's cache holds, and how it comes to hold a new
prompt's tokens (a prefix kept or borrowed from another slot, runs moved), is the slot cache's (slot_cache.py).

A prompt's last token is computed in a step of its own (``LlamaModel.last_token_alone``, on by default): a cached
prompt's is (at least the last token is evaluated), and llama.cpp's CPU kernels add up a batch of one and a batch of
hundreds in different orders, so computing it with the rest made a near-tie in a cold prompt's first logits go
another way than in the same prompt cached. Off, the loop computes it with the rest, as llama-server does.

It is over 450 lines: a step (the batch built, one decode, each slot's sampling and draft verified) reads and
writes the batch and every slot's state at each line; what stands apart is in modules of its own (the slot cache,
job dispatch, speculation, sampling, media, adapters, slot files).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import llama_cpp.llama_cpp as lc

from localinfer.backends.base import DecodeStats, SlotInfo, SlotUsage
from localinfer.backends.llamacpp import checkpoints
from localinfer.backends.llamacpp.dispatch import JobQueue
from localinfer.backends.llamacpp.job import Job, Outbox, Slot
from localinfer.backends.llamacpp.logprobs import sample_with_logprob, token_logprob
from localinfer.backends.llamacpp.lora import LoraAdapters, Scales, next_group
from localinfer.backends.llamacpp.media import Projector, media_affinity, text_run
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.sampling import greedy_token
from localinfer.backends.llamacpp.slot_cache import SlotCache
from localinfer.backends.llamacpp.slot_files import Result, SlotAction, SlotActions, SlotFiles
from localinfer.backends.llamacpp.speculative import DraftFactory, Speculation
from localinfer.backends.llamacpp.step_costs import StepCosts
from localinfer.errors import GenerationFailed, InvalidRequest, LocalInferError, SlotFileError
from localinfer.types import FinishReason

log = logging.getLogger(__name__)

# On a CPU, while other slots are generating, a prompt is prefilled at most this many tokens per step, so that their
# streams keep flowing (a 512-token chunk takes seconds on a small CPU). On a GPU a micro-batch (_prefill_step).
PREFILL_CHUNK_WHILE_GENERATING = 128


@dataclass(frozen=True)
class Drafting:
    """How the loop speculates: each request's draft source, made from its prompt and its slot, the draft's
    bounds, whether each draft is cut to the length the step costs say pays (``weigh_costs``: proposals that cost
    nothing to make) or fed whole (a draft model's), and how many slots may be generating for drafts to be fed at
    all (``max_generating``).

    A drafted token costs a place in the batch whether it is kept or not. Where a step's cost grows with every token
    (a CPU past one token: CPU_DRAFTING_SLOTS), a drafted token costs nearly what a generated one does once several
    slots generate, so drafting waits until fewer do."""

    source: DraftFactory
    draft_max: int
    draft_min: int
    weigh_costs: bool = True
    max_generating: int = 1
    # what cuts the drafts of a greedy or seeded request, when they are weighed (None: the costs measured): a rule,
    # so that the same request is drafted alike each time it is asked (step_costs.RuleCosts)
    reproducible_costs: StepCosts | None = None


class StepLoop:
    def __init__(
        self,
        model: LlamaModel,
        *,
        max_queue: int,
        drafting: Drafting | None = None,
        costs: StepCosts | None = None,
        adapters: LoraAdapters | None = None,
        projector: Projector | None = None,
        queued_decode: bool | None = None,
    ) -> None:
        """``costs``: what steps cost by width, for the lengths of drafts that weigh them (None: a table measured as
        the loop runs; no table, and no step timed, when no draft weighs them). ``adapters``: the model's LoRA
        adapters, which a step applies at the scales of the slots it batches (lora.py). ``projector``: what decodes
        the pictures and sounds of prompts (media.py). ``queued_decode``: whether llama_decode returns once the step
        is queued, before it is computed, as on a GPU (None: whether the model has layers on one); the loop then
        prefills a whole batch a step when nothing else waits (_prefill_step), and hands a step's tokens over after
        the next step is queued."""
        self._model = model
        self._adapters = adapters
        self._group: Scales | None = None  # the adapters' scales of the slots batched in the last step
        self._group_steps = 0  # steps in a row that batched them
        self._projector = projector
        self._n_started = 0  # jobs started so far, and when each slot last started one (for media_affinity)
        self._started_at = [0] * model.n_seq_max
        self._drafting = drafting
        self._slots = [Slot(seq_id=i) for i in range(model.n_seq_max)]
        self._queue = JobQueue(self._slots, max_queue=max_queue, affinity=self._served_tokens)
        self._capacity = max(model.n_batch, model.n_seq_max)
        self._batch = lc.llama_batch_init(self._capacity, 0, 1)
        assert model.ctx is not None, "the step loop needs a loaded model"
        self._ctx: lc.llama_context_p = model.ctx
        self._memory = lc.llama_get_memory(self._ctx)
        self._n_vocab = int(lc.llama_vocab_n_tokens(model.vocab))
        self._n_swa = model.n_swa
        self._cache = SlotCache(model, self._slots)
        weighing = drafting is not None and drafting.weigh_costs
        self._costs = (costs if costs is not None else StepCosts()) if weighing else None
        self._reproducible_costs = (drafting.reproducible_costs or self._costs) if drafting and weighing else None
        self.outbox = Outbox()
        # On a GPU, llama_decode returns once the step is queued: a step's tokens are handed to the event loops after
        # the next step's decode is queued, so the hand-over and the HTTP side's work on them (which holds the GIL)
        # run while the GPU computes, not between steps while it waits. On a CPU llama_decode computes the whole step
        # before it returns, and the tokens go out before it.
        self._queued_decode = model.gpu_layers > 0 if queued_decode is None else queued_decode
        self.stats = DecodeStats()  # what /metrics reports as llama-server's llamacpp:* series
        self._draft_places = min(drafting.draft_max, model.draft_room) if drafting is not None else 0
        self._actions = SlotActions()  # slots' saves, restores and erases, run between steps (slot_files.py)
        self._held: set[int] = set()  # the slots whose prompt's last token the last step held back
        self._slot_files = SlotFiles(self._ctx, n_ctx=model.n_ctx, n_vocab=self._n_vocab, n_swa=self._n_swa)
        self._thread = threading.Thread(target=self._run, name="localinfer-llamacpp", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Hand ``job`` to the loop; called from the requester's thread. Raises QueueFull, and frees the job,
        when every slot is busy and ``max_queue`` jobs already wait; ModelNotReady once the loop has stopped."""
        self._queue.submit(job)

    def act(self, action: SlotAction) -> Future[Result]:
        """Hand a slot's save, restore or erase to the loop, which runs it once the slot holds no request; called
        from the requester's thread. A slot id past the last slot wraps around, as llama-server's does. Raises
        InvalidRequest for a negative slot id, ModelNotReady once the loop has stopped."""
        if action.seq_id < 0:
            raise InvalidRequest("Invalid slot ID", param="id_slot", hint=f"slots are 0 to {len(self._slots) - 1}")
        future = self._actions.submit(dataclasses.replace(action, seq_id=action.seq_id % len(self._slots)))
        self._queue.wake()
        return future

    def stop(self) -> None:
        """Fail every job in flight, end the thread and free the batch. The model is freed by the caller."""
        self._queue.stop()
        self._thread.join()
        lc.llama_batch_free(self._batch)

    @property
    def n_slots(self) -> int:
        return len(self._slots)

    def busy_slots(self) -> int:
        return self.n_slots - self._queue.idle_slots()

    def idle_slots(self) -> int:
        return self._queue.idle_slots()

    def usage(self) -> SlotUsage:
        idle = self._queue.idle_slots()
        return SlotUsage(processing=self.n_slots - idle, idle=idle, waiting=self._queue.waiting)

    def slots(self) -> list[SlotInfo]:
        """What each slot is doing now, read from any thread without stopping the loop: each slot's job is read
        once, so a slot's answer is of one moment (another slot's may be of the next step)."""
        infos = []
        for slot in self._slots:
            job = slot.job
            infos.append(
                SlotInfo(
                    id=slot.seq_id,
                    n_ctx=self._model.n_ctx,
                    is_processing=job is not None,
                    n_cached=len(slot.cached),
                    n_prompt=len(job.prompt) if job is not None else 0,
                    n_decoded=job.sampled if job is not None else 0,
                    has_new_line=job is not None and job.has_new_line,
                    n_remain=job.n_remain if job is not None else -1,
                )
            )
        return infos

    # --- the thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        error = GenerationFailed("the model was unloaded while generating")
        try:
            while self._queue.collect():
                self._queue.dispatch(self._start, self._release)
                if self.busy_slots():
                    self._step()
                self._run_actions()
                if not (self._queued_decode and self.busy_slots()):  # else once the next step is queued (__init__)
                    self.outbox.flush()
        except Exception as exc:  # a bug here must not leave requesters waiting forever
            log.exception("the inference loop stopped")
            error = GenerationFailed(f"the inference loop stopped: {exc}")
            raise
        finally:
            self._fail_all(error)
            self.outbox.flush()

    def _run_actions(self) -> None:
        """Run the slot actions whose slot holds no request (a busy slot's wait for it to end)."""
        for action, future in self._actions.take_ready(lambda seq_id: self._slots[seq_id].idle):
            if not future.set_running_or_notify_cancel():
                continue  # its requester went away
            try:
                future.set_result(self._slot_files.run(action, self._slots[action.seq_id]))
            except LocalInferError as exc:
                future.set_exception(exc)
            except Exception as exc:  # a bug here fails the action, not the loop
                log.exception("the %s of slot %d failed", action.kind, action.seq_id)
                future.set_exception(SlotFileError(f"Unable to {action.kind} slot: {exc}"))

    def _start(self, slot: Slot, job: Job) -> None:
        """Reuse what the slot's cache (or another's) holds of the prompt (slot_cache.py); at least the last
        prompt token is evaluated."""
        reuse, shared, shifted = self._cache.take(slot, job)
        slot.next_token = None
        slot.draft = []
        slot.job = job
        job.id_slot = slot.seq_id
        job.cached_tokens = reuse + shifted
        self._n_started += 1
        self._started_at[slot.seq_id] = self._n_started
        self.stats.cached_tokens += reuse + shifted
        job.shared_tokens = shared
        job.shifted_tokens = shifted
        job.t_prefill_start = time.perf_counter()
        job.report_progress(len(slot.cached))  # the request has started: nothing computed yet
        if (
            self._drafting is not None and job.media is None
        ):  # made here, not at submit: a draft model drafts in the slot's sequence
            d = self._drafting
            job.speculation = Speculation(
                d.source(job.prompt, slot.seq_id, not job.reproducible),
                draft_max=d.draft_max,
                draft_min=d.draft_min,
                costs=self._reproducible_costs if job.reproducible else self._costs,
            )

    def _served_tokens(self, slot: Slot, prompt: list[int]) -> int:
        """How many of ``prompt``'s tokens ``slot``'s cache serves (slot_cache.py), weighed for a prompt with
        media."""
        served = self._cache.served(slot, prompt)
        if self._projector is None:
            return served
        return media_affinity(slot.cached, prompt, served, idle_for=self._n_started - self._started_at[slot.seq_id])

    # --- one step ---------------------------------------------------------------------------------------

    def _step(self) -> None:
        group = self._next_group()  # the slots of one set of adapters' scales are batched (lora.py)
        if self._adapters is not None:
            self._adapters.apply(self._ctx, group)
        if self._projector is not None:
            self._decode_media(self._projector, group)
        generating = [s for s in self._slots if s.job is not None and s.next_token is not None and s.lora == group]
        n = 0
        fed: list[tuple[Slot, list[int]]] = []
        for slot in self._slots:
            slot.batch_index = -1
        drafting = self._drafting is not None and len(generating) <= self._drafting.max_generating
        for slot in generating:  # one token each, and a draft of the tokens after it where one is guessed
            assert slot.next_token is not None and slot.job is not None
            if self._model.context_shift and len(slot.cached) + 1 >= self._model.n_ctx:
                self._cache.shift_context(slot, slot.job)
            slot.draft = self._draft(slot, slot.job, n + 1, self._capacity - n - 1) if drafting else []
            tokens = [slot.next_token, *slot.draft]
            for i, token in enumerate(tokens):
                self._add(n + i, token, len(slot.cached) + i, slot.seq_id, True)
            slot.batch_index = n
            fed.append((slot, tokens))
            n += len(tokens)
        n_generating = n
        held: set[int] = set()  # the slots whose prompt's last token waits for the next step
        # One micro-batch of prompt per step at most (but on a GPU: _prefill_step): llama.cpp computes no more at
        # once anyway, and between steps a waiting job of higher priority can take the slot of a long prompt
        # (JobQueue.dispatch).
        budget = min(self._capacity - n, self._prefill_step(generating=bool(generating)))
        by_priority = sorted(self._slots, key=lambda s: -s.job.priority if s.job is not None else 0)
        for slot in by_priority:  # then prompt chunks, highest priority first, as far as the budget allows
            if slot.job is None or not slot.to_prefill or budget <= 0 or slot.lora != group:
                continue
            take = slot.to_prefill[:budget] if slot.job.media is None else text_run(slot.to_prefill, budget)
            if not take:  # a picture comes next: decoded at the next step's start
                continue
            if self._model.last_token_alone and len(take) == len(slot.to_prefill) > 1 and not slot.pending:
                take = take[:-1]  # the prompt's last token is computed next step, on its own (module docstring)
                held.add(slot.seq_id)
            pos = len(slot.cached)
            for i, token in enumerate(take):
                last = i == len(take) - 1 and len(take) == len(slot.to_prefill) and not slot.pending
                self._add(n, token, pos + i, slot.seq_id, last)
                if last:
                    slot.batch_index = n
                n += 1
            slot.to_prefill = slot.to_prefill[len(take) :]
            budget -= len(take)
            fed.append((slot, take))
        self._batch.n_tokens = n
        if n == 0:  # only pictures were decoded this step
            if self._queued_decode:
                self.outbox.flush()  # no step queued: the last step's tokens go now (__init__)
            return
        started = time.perf_counter()
        rc = lc.llama_decode(self._ctx, self._batch)
        if self._queued_decode:
            self.outbox.flush()  # the last step's tokens, while the GPU computes this one (__init__)
        if rc != 0:
            self._decode_failed(rc, fed)
            return
        if self._costs is not None and len(fed) == len(generating):  # no prompt chunk: all with logits, as drafts
            lc.llama_synchronize(self._ctx)  # a GPU computes after llama_decode returns: wait, to time all of it
            self._costs.record(n, (time.perf_counter() - started) * 1000.0)
        elif n > n_generating and any(slot.batch_index >= 0 for slot, _ in fed):
            lc.llama_synchronize(self._ctx)  # to time the prompt's computing, as llama-server's metrics do
            # (a chunk that ends no prompt is not waited for: a GPU computes it while the next one is prepared)
        prompt_seconds = time.perf_counter() - started
        for slot, tokens in fed:
            slot.cached.extend(tokens)
            if slot.job is not None and slot.pending and not slot.to_prefill:
                self._cache.put_back(slot, slot.job.prompt)
            if slot.job is not None and slot not in generating:  # a chunk of its prompt was computed
                slot.job.report_progress(len(slot.cached))
            if self._n_swa and slot.job is not None and slot.next_token is None and not slot.to_prefill:
                slot.checkpoint = checkpoints.take(self._ctx, self._memory, slot.seq_id, len(slot.cached))
        alone = not n_generating and all(len(t) == 1 and slot.seq_id in self._held for slot, t in fed)
        self._held = held
        self.stats.decoded(
            busy=sum(s.job is not None for s in self._slots),
            longest=max(len(s.cached) for s in self._slots),
            prompt_tokens=n - n_generating,
            seconds=prompt_seconds,
            counted=not alone,  # llama-server computes the last token with the rest: a decode it does not make
        )
        for slot in self._slots:
            if slot.job is not None and slot.batch_index >= 0:
                self._sample(slot, slot.job)

    def _next_group(self) -> Scales:
        """The adapters' scales whose slots this step batches: each set the busy slots hold, in turn."""
        groups = list(dict.fromkeys(s.lora for s in self._slots if s.job is not None))
        group = next_group(groups, self._group, self._group_steps) if groups else ()
        self._group_steps = self._group_steps + 1 if group == self._group else 1
        self._group = group
        return group

    def _decode_media(self, projector: Projector, group: Scales) -> None:
        """Decode the picture or sound each prompting slot of this step's adapter scales (``group``) has reached,
        each in a decode of its own, as llama-server does (media.py); text of other slots is batched after. A
        failure fails that request alone."""
        for slot in self._slots:
            job = slot.job if slot.lora == group else None
            chunk = job.media.at(slot.to_prefill[0]) if job and job.media and slot.to_prefill else None
            if job is None or chunk is None:
                continue
            try:
                done = projector.decode(self._ctx, chunk, len(slot.cached), slot.seq_id, self._model.n_batch)
            except RuntimeError as exc:
                log.error("request %s: a media part failed: %s", job.request_id, exc)
                job.fail(GenerationFailed(f"the picture or sound could not be computed: {exc}"))
                self._release(slot)
                self._cache.clear(slot)
                continue
            slot.cached.extend(slot.to_prefill[: chunk.n_pos])
            slot.to_prefill = slot.to_prefill[chunk.n_pos :]
            job.media_decoded += chunk.n_tokens
            job.encode_ms += done.encode_ms
            self.stats.media(chunk.n_tokens, done.encode_ms / 1000.0)
            job.report_progress(len(slot.cached))

    def _prefill_step(self, *, generating: bool) -> int:
        """The most prompt tokens a step takes. On a CPU a micro-batch, and while slots are ``generating``
        PREFILL_CHUNK_WHILE_GENERATING, since a step's tokens take their time in compute there.

        On a GPU with nothing else to do (no slot generating and no job waiting) a whole batch, which llama.cpp
        computes micro-batch by micro-batch without a sync between them: a step per micro-batch costs a sync and a
        turn of this loop each, while a GPU waits (#42 measured the prefill of a 3B model at 0.90x of llama-server's
        on an H100). The micro-batches are the same either way, so the cache is too. Beside generating slots, a
        micro-batch: a GPU computes one in milliseconds, and a prompt cut in chunks of 128 waited four steps of the
        others' tokens for each micro-batch, its first token later than llama-server's (which takes a whole batch
        beside them)."""
        if not self._queued_decode:
            return min(self._model.n_ubatch, PREFILL_CHUNK_WHILE_GENERATING) if generating else self._model.n_ubatch
        if generating or self._queue.waiting:
            return self._model.n_ubatch
        return self._capacity

    def _add(self, i: int, token: int, pos: int, seq_id: int, logits: bool) -> None:
        batch = self._batch
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq_id
        batch.logits[i] = logits

    def _draft(self, slot: Slot, job: Job, width: int, room: int) -> list[int]:
        """The draft to verify after the slot's next token, in a step ``width`` tokens wide with that token: none
        without speculation, and never more than the batch, the context, the request's token limit and the
        context's outputs (``LlamaModel.draft_room``: step_limits.py) leave room for."""
        if job.speculation is None:
            return []
        room = min(room, self._model.n_ctx - len(slot.cached) - 2, self._model.draft_room)
        if job.max_tokens is not None:
            room = min(room, job.max_tokens - job.generated - 1)
        return job.speculation.draft(room, width) if room > 0 else []

    def _sample(self, slot: Slot, job: Job) -> None:
        """Sample at the slot's next token and go on through its draft while the sampler picks the drafted token;
        emit each token kept and decide whether to go on. The draft's rejected tail leaves the cache."""
        if job.max_tokens == 0:  # the prompt only (llama-server's n_predict 0, an editor warming the cache)
            self._finish(slot, "length")
            return
        draft, slot.draft = slot.draft, []
        n_valid = len(slot.cached) - len(draft)  # cached tokens that stay whatever is rejected
        slot.next_token = None
        accepted = 0
        while True:
            token = self._take(slot, job, slot.batch_index + accepted, n_valid + accepted)
            if token is None:
                break
            if accepted < len(draft) and token == draft[accepted]:
                accepted += 1  # the model picked the drafted token: its logits, one further on, are valid too
                continue
            slot.next_token = token
            break
        if draft:
            self.stats.verified(len(draft), accepted, self._draft_places)
            del slot.cached[n_valid + accepted :]
            lc.llama_memory_seq_rm(self._memory, slot.seq_id, len(slot.cached), -1)
        if job.speculation is None:
            return
        if slot.job is not job:  # the request ended in this step: the drafts it kept still join its text
            job.speculation.source.extend(draft[:accepted])  # (so a recent output holds all of them)
            return
        kept = [*draft[:accepted], *([] if slot.next_token is None else [slot.next_token])]
        job.speculation.verified(draft, accepted, kept)

    def _take(self, slot: Slot, job: Job, index: int, n_cached: int) -> int | None:
        """Sample at batch ``index`` (``n_cached`` tokens before it in the cache) and emit the token; None when
        the request ended here (finished, or failed alone), else the token to go on from."""
        model = self._model
        try:
            logprob = None
            forced = job.thinking.forced() if job.thinking is not None else None
            if forced is not None:  # the thinking's budget is spent: its end is written in the model's place
                token = forced
                if job.sampler and not job.greedy:
                    lc.llama_sampler_accept(job.sampler, token)
            elif job.n_logprobs is not None and job.logprobs_after_sampling and job.sampler:
                token, logprob = sample_with_logprob(model, self._ctx, job.sampler, index, job.n_logprobs)
            elif job.greedy:
                token = greedy_token(self._ctx, index, self._n_vocab, job.greedy_bias)
            else:
                token = lc.llama_sampler_sample(job.sampler, self._ctx, index)
            if job.thinking is not None:
                job.thinking.taken(int(token))
            job.t_last_token = time.perf_counter()
            if job.sampled == 0:
                job.t_first_token = job.t_last_token
            job.sampled += 1
            end = model.is_eog(token) and not job.ignore_eos
            if job.n_logprobs is not None and logprob is None and (job.logprobs_of_end or not end):
                logprob = token_logprob(model, self._ctx, index, token, job.n_logprobs)
            if end:
                job.pending_tokens.append(int(token))  # no text, but its id comes last, as llama-server's does
                if logprob is not None and job.logprobs_of_end:
                    job.pending_logprobs.append(logprob)
                self._finish(slot, "stop")
                return None
            job.generated += 1
            if logprob is not None:
                job.pending_logprobs.append(logprob)
            job.emit(int(token), job.text.push(model.token_bytes(token)))
        except Exception as exc:
            log.exception("request %s failed while sampling", job.request_id)
            job.fail(GenerationFailed(f"generation failed: {exc}"))
            self._release(slot)
            return None
        if job.text.stopped:
            self._finish(slot, "length" if job.text.limited else "stop")
        elif job.reached_max_tokens() or (n_cached + 1 >= model.n_ctx and not model.context_shift):
            self._finish(slot, "length")
        else:
            return int(token)
        return None

    def _finish(self, slot: Slot, reason: FinishReason) -> None:
        assert slot.job is not None
        slot.job.finish(reason)
        self._release(slot)

    def _release(self, slot: Slot) -> None:
        """Free the slot for the next job; its cache stays, for a later request that shares its prefix."""
        if slot.job is not None:
            self.stats.ended(slot.job.sampled, slot.job.t_last_token - slot.job.t_first_token)
            slot.job.close()
        slot.job = None
        slot.next_token = None
        slot.to_prefill = []
        slot.draft = []

    def _decode_failed(self, rc: int, fed: list[tuple[Slot, list[int]]]) -> None:
        """A failed decode fails the requests in that batch; their cache is cleared so it stays consistent."""
        log.error("llama_decode returned %d", rc)
        for slot, _ in fed:
            if slot.job is not None:
                slot.job.fail(GenerationFailed(f"llama.cpp could not evaluate the batch (code {rc})"))
                self._release(slot)
            self._cache.clear(slot)

    def _fail_all(self, error: GenerationFailed) -> None:
        self._queue.close(error)
        self._actions.close(error)
        for slot in self._slots:
            if slot.job is not None:
                slot.job.fail(error)
                self._release(slot)
