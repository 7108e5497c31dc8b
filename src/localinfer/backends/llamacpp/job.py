"""One request's state while the inference thread works on it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import llama_cpp.llama_cpp as lc

from localinfer.backends.llamacpp.checkpoints import Checkpoint
from localinfer.backends.llamacpp.kv_shift import Run
from localinfer.backends.llamacpp.media import MediaSpans
from localinfer.backends.llamacpp.sampling import TokenBias
from localinfer.backends.llamacpp.speculative import Speculation
from localinfer.backends.llamacpp.thinking_budget import ThinkingCutter
from localinfer.backends.text_stream import TextStream
from localinfer.types import FinishReason, PromptProgress, Timings, TokenChunk, TokenLogprob, Usage

Delivery = Callable[[TokenChunk | BaseException], None]
Item = TokenChunk | BaseException

log = logging.getLogger(__name__)


class Outbox:
    """What one step produced for its requesters, handed to each event loop in one call.

    One wake-up of the event loop per step, rather than one per token and slot, keeps the HTTP side's share
    of the CPU small while every slot streams.
    """

    def __init__(self) -> None:
        self._items: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[Item], Item]]] = {}

    def delivery(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Item]) -> Delivery:
        """A job's delivery: what it sends waits here until ``flush``."""

        def deliver(item: Item) -> None:
            self._items.setdefault(loop, []).append((queue, item))

        return deliver

    def flush(self) -> None:
        items, self._items = self._items, {}
        for loop, batch in items.items():
            try:
                loop.call_soon_threadsafe(_put_all, batch)
            except RuntimeError:  # the requester's loop is closed: nobody is waiting any more
                log.debug("dropped %d chunks for a closed event loop", len(batch))


def _put_all(batch: list[tuple[asyncio.Queue[Item], Item]]) -> None:
    for queue, item in batch:
        queue.put_nowait(item)


@dataclass(eq=False)
class Job:
    """A tokenized request, its sampler and where its chunks go. Touched only by the inference thread,
    except ``cancelled``, which the requester sets when it goes away."""

    request_id: str
    prompt: list[int]
    sampler: lc.llama_sampler_p | None
    max_tokens: int | None
    ignore_eos: bool
    deliver: Delivery
    text: TextStream
    cache_prompt: bool = True
    greedy: bool = False  # the sampler is the greedy one alone: the step loop takes the logits' argmax instead
    greedy_bias: TokenBias | None = None  # the logit biases (of a greedy sampler) that argmax adds first
    reproducible: bool = False  # greedy or seeded: drafted from its own text only (SamplingParams.reproducible)
    cancelled: bool = False
    cached_tokens: int = 0
    generated: int = 0
    t_prefill_start: float = 0.0
    t_first_token: float = 0.0
    t_last_token: float = 0.0
    sampled: int = 0  # tokens sampled, an end-of-generation token included (generated counts those sent)
    n_logprobs: int | None = None  # None: no log-probabilities; else each token's and this many most likely ones
    logprobs_of_end: bool = False  # the end-of-generation token's log-probability too, in the last chunk
    logprobs_after_sampling: bool = False  # under the sampler chain's distribution (sampled by sample_with_logprob)
    priority: int = 1  # PRIORITY_RANK: a higher one gets a free slot, and the prefill budget, first
    yielded: bool = False  # it gave up its slot, mid-prompt, to a job of higher priority (once at most)
    pending_logprobs: list[TokenLogprob] = field(default_factory=list)
    pending_tokens: list[int] = field(default_factory=list)  # the ids of the tokens whose text is held back
    has_new_line: bool = False  # a line break was sent (llama-server's /slots has_new_line)
    speculation: Speculation | None = None  # drafts its generating steps (None: one token per step)
    shared_tokens: int = 0  # of cached_tokens, those copied from another slot's cache
    shifted_tokens: int = 0  # of cached_tokens, those moved to new positions (kv_shift.py)
    n_keep: int = 0  # the prompt's first tokens a context shift keeps (-1: the whole prompt)
    context_shifts: int = 0  # times its context was shifted to make room
    timings_per_token: bool = False  # every chunk carries the timings so far (llama-server's timings_per_token)
    return_progress: bool = False  # chunks say how far the prompt is (llama-server's return_progress)
    id_slot: int | None = None  # the slot it runs in, once it has one
    thinking: ThinkingCutter | None = None  # a reasoning model's thinking budget, when the request set one
    lora: tuple[float, ...] = ()  # the LoRA adapters' scales it is computed with (lora.py; (): none loaded)
    media: MediaSpans | None = None  # the prompt's pictures and sounds, by their first positions (media.py)
    media_decoded: int = 0  # embeddings of them decoded (those cached are not)
    encode_ms: float = 0.0  # the projector's time encoding them

    def reached_max_tokens(self) -> bool:
        return self.max_tokens is not None and self.generated >= self.max_tokens

    @property
    def n_remain(self) -> int:
        """llama-server's ``n_remain``: the tokens it may still sample (-1: as many as fit)."""
        return -1 if self.max_tokens is None else self.max_tokens - self.sampled

    def emit(self, token: int, text: str) -> None:
        """Take the generated ``token``, whose bytes let out ``text``, and send that text with the ids and the
        log-probabilities of the tokens not sent yet (text held back, a piece of a character or a possible stop
        string, carries its tokens into the chunk that sends it)."""
        self.pending_tokens.append(token)
        if text:
            self.has_new_line = self.has_new_line or "\n" in text
            logprobs, self.pending_logprobs = tuple(self.pending_logprobs), []
            tokens, self.pending_tokens = tuple(self.pending_tokens), []
            timings = self.timings() if self.timings_per_token else None
            self.deliver(
                TokenChunk(
                    text,
                    logprobs=logprobs,
                    tokens=tokens,
                    timings=timings,
                    id_slot=self.id_slot,
                    prompt_tokens=len(self.prompt),
                    cached_tokens=self.cached_tokens,
                )
            )

    def report_progress(self, processed: int) -> None:
        """Say that ``processed`` of the prompt's tokens are in the cache (a request that asked: return_progress)."""
        if self.return_progress:
            elapsed = int((time.perf_counter() - self.t_prefill_start) * 1000)
            progress = PromptProgress(len(self.prompt), self.cached_tokens, processed, elapsed)
            self.deliver(TokenChunk("", progress=progress))

    def timings(self) -> Timings:
        """The timings so far. They mean what llama-server's do: ``predicted_n`` every token sampled (an
        end-of-generation one included), ``predicted_ms`` from the first of them to the last (at least a
        microsecond once one was)."""
        first = self.t_first_token or time.perf_counter()
        generating = max(self.t_last_token - first, 1e-6) if self.sampled else 0.0
        return Timings(
            prompt_ms=(first - self.t_prefill_start) * 1000.0,
            predicted_ms=generating * 1000.0,
            prompt_n=len(self.prompt) - self.cached_tokens,
            predicted_n=self.sampled,
            draft_n=self.speculation.proposed if self.speculation is not None else 0,
            draft_n_accepted=self.speculation.accepted if self.speculation is not None else 0,
            cache_shared_n=self.shared_tokens,
            cache_shifted_n=self.shifted_tokens,
            cache_n=self.cached_tokens,
            media_n=self.media_decoded,
            encode_ms=self.encode_ms,
        )

    def finish(self, reason: FinishReason) -> None:
        """Send the held-back text and the closing chunk with usage and timings (``timings``)."""
        timings = self.timings()
        usage = Usage(len(self.prompt), self.generated, self.cached_tokens)
        tail = self.text.flush()
        logprobs, self.pending_logprobs = tuple(self.pending_logprobs), []
        tokens, self.pending_tokens = tuple(self.pending_tokens), []
        self.deliver(
            TokenChunk(
                tail,
                finish_reason=reason,
                usage=usage,
                timings=timings,
                stop_word=self.text.stop_word,
                logprobs=logprobs,
                tokens=tokens,
                id_slot=self.id_slot,
                prompt_tokens=len(self.prompt),
                cached_tokens=self.cached_tokens,
                truncated=self.context_shifts > 0,
            )
        )

    def fail(self, error: BaseException) -> None:
        self.deliver(error)

    def close(self) -> None:
        """Free the sampler; the job is done with, whichever way it ended."""
        if self.sampler:
            lc.llama_sampler_free(self.sampler)
            self.sampler = None
        if self.media is not None:
            self.media.free()
            self.media = None


@dataclass(eq=False)
class Slot:
    """One sequence of the context. ``cached`` mirrors the tokens whose keys and values are in its cache."""

    seq_id: int
    cached: list[int] = field(default_factory=list)
    job: Job | None = None
    to_prefill: list[int] = field(default_factory=list)
    next_token: int | None = None
    draft: list[int] = field(default_factory=list)  # fed after next_token this step, to be verified
    batch_index: int = -1
    checkpoint: Checkpoint | None = None  # sliding-window models only: the window as of the last prompt
    # runs of the old cache waiting in the scratch sequence, each to be put back once the tokens before it are
    # computed, with the prompt's tokens after it (kv_shift.py); ``shift``: how far they have moved so far
    pending: list[tuple[Run, list[int]]] = field(default_factory=list)
    shift: int = 0
    lora: tuple[float, ...] = ()  # the LoRA adapters' scales its cache was computed with (lora.py)

    @property
    def idle(self) -> bool:
        return self.job is None

    def yield_job(self) -> Job:
        """Give up the job, mid-prompt, for one of higher priority, which will replace what this slot caches
        beyond the prefix the two prompts share."""
        job = self.job
        assert job is not None and self.next_token is None, "only a job still computing its prompt yields"
        job.yielded = True
        self.job = None
        self.to_prefill = []
        self.pending = []  # the runs left in the scratch sequence are dropped when the next job starts
        return job


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
