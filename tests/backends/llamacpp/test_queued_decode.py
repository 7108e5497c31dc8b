"""The step loop's way for a GPU, where llama_decode returns once a step is queued (StepLoop's ``queued_decode``),
taken on this CPU with SmolLM2: a prompt is prefilled a whole batch a step, and a step's tokens are handed to the
requesters once the next step is queued. Neither may change what a requester gets: the text, the tokens one by one,
the end and its figures, for a request alone and for requests decoded together; and what is handed over waits for no
more steps than the way says (none on a CPU, the next one's queueing on a GPU)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import llama_cpp.llama_cpp as lc
import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.job import Outbox
from localinfer.backends.llamacpp.step_loop import PREFILL_CHUNK_WHILE_GENERATING
from localinfer.models.store import Manifest
from localinfer.types import GenerationOptions, GenerationRequest, SamplingParams, TokenChunk

# Long enough for several micro-batches of 512 tokens: one step of the GPU's way, three of the CPU's.
LONG_PROMPT = "The tide came in over the flat sand and went out again. " * 110


@contextlib.asynccontextmanager
async def backend_of(smollm2: Manifest, *, queued: bool, parallel: int) -> AsyncIterator[LlamaCppBackend]:
    backend = LlamaCppBackend(queued_decode=queued)
    await backend.load(LoadSpec(path=smollm2.path, ctx_size=4096, parallel=parallel, threads=2, speculation="off"))
    try:
        yield backend
    finally:
        await backend.unload()


async def reply(backend: LlamaCppBackend, prompt: str, max_tokens: int) -> tuple[list[TokenChunk], TokenChunk]:
    """The chunks of text, one per token as the loop hands them over, and the last chunk."""
    options = GenerationOptions(SamplingParams(temperature=0.0), max_tokens=max_tokens, ignore_eos=True)
    chunks = [chunk async for chunk in backend.generate(GenerationRequest(prompt[:12], prompt, options))]
    assert chunks and chunks[-1].finish_reason is not None
    return [c for c in chunks if c.tokens and c.finish_reason is None], chunks[-1]


async def test_a_request_alone_gets_the_same_text_tokens_and_figures_the_gpus_way(smollm2: Manifest) -> None:
    answers = []
    for queued in (False, True):
        async with backend_of(smollm2, queued=queued, parallel=1) as backend:
            answers.append(await reply(backend, LONG_PROMPT, 24))
    (cpu_chunks, cpu_end), (gpu_chunks, gpu_end) = answers
    assert [c.tokens for c in gpu_chunks] == [c.tokens for c in cpu_chunks]
    assert "".join(c.text for c in gpu_chunks) + gpu_end.text == "".join(c.text for c in cpu_chunks) + cpu_end.text
    assert gpu_end.usage == cpu_end.usage
    assert gpu_end.timings is not None and cpu_end.timings is not None
    assert gpu_end.timings.prompt_n == cpu_end.timings.prompt_n > 1024


class Handovers:
    """What the step loop's thread did, in order: each llama_decode ("decode"), each chunk put in the outbox ("put")
    and each hand-over ("flush")."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[str] = []
        decode, delivery, flush = lc.llama_decode, Outbox.delivery, Outbox.flush

        def counted_decode(ctx: lc.llama_context_p, batch: lc.llama_batch) -> int:
            self.events.append("decode")
            return int(decode(ctx, batch))

        def counted_delivery(outbox: Outbox, *args: Any) -> Callable[[Any], None]:
            deliver = delivery(outbox, *args)

            def put(item: Any) -> None:
                self.events.append("put")
                deliver(item)

            return put

        def counted_flush(outbox: Outbox) -> None:
            self.events.append("flush")
            flush(outbox)

        monkeypatch.setattr(lc, "llama_decode", counted_decode)
        monkeypatch.setattr(Outbox, "delivery", counted_delivery)
        monkeypatch.setattr(Outbox, "flush", counted_flush)

    def most_steps_waited(self) -> int:
        """The most decodes that began between a chunk's put and its hand-over."""
        most, waiting = 0, None  # decodes since the oldest chunk not yet handed over
        for event in self.events:
            if event == "put" and waiting is None:
                waiting = 0
            elif event == "decode" and waiting is not None:
                waiting += 1
            elif event == "flush":
                most, waiting = max(most, waiting or 0), None
        assert waiting is None, "a chunk was never handed over"
        return most


@pytest.mark.parametrize("queued", [False, True], ids=["cpu-way", "gpu-way"])
async def test_requests_decoded_together_each_get_every_token_and_their_end(
    smollm2: Manifest, queued: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shortest ends while the others go on (its end waits for the next step to be queued, the GPU's way), and
    the last ends with no step after it; nothing handed over waits longer than the way says."""
    lengths = (5, 17, 40)
    handovers = Handovers(monkeypatch)
    async with backend_of(smollm2, queued=queued, parallel=3) as backend:
        prompts = [f"Story {i}: once upon a time" for i in range(len(lengths))]
        answers = await asyncio.gather(*(reply(backend, p, n) for p, n in zip(prompts, lengths, strict=True)))
    for (chunks, end), n in zip(answers, lengths, strict=True):
        assert end.finish_reason == "length"
        assert end.usage is not None and end.usage.completion_tokens == n
        assert sum(len(c.tokens) for c in chunks) + len(end.tokens) == n
    assert handovers.most_steps_waited() == (1 if queued else 0)


@pytest.mark.parametrize(
    ("queued", "chunk"), [(False, PREFILL_CHUNK_WHILE_GENERATING), (True, 512)], ids=["cpu-way", "gpu-way"]
)
async def test_a_prompt_beside_a_generating_request_is_computed_a_micro_batch_a_step_the_gpus_way(
    smollm2: Manifest, queued: bool, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one request generates (until the other has its answer), a long prompt is computed beside its token in
    chunks of PREFILL_CHUNK_WHILE_GENERATING on a CPU and of a micro-batch (512 tokens) on a GPU, where llama-server
    takes a whole batch: a 1,300-token prompt waits for three steps of the others' tokens, not eleven."""
    widths: list[int] = []
    decode = lc.llama_decode

    def recorded(ctx: lc.llama_context_p, batch: lc.llama_batch) -> int:
        widths.append(int(batch.n_tokens))
        return int(decode(ctx, batch))

    monkeypatch.setattr(lc, "llama_decode", recorded)
    options = GenerationOptions(SamplingParams(temperature=0.0), max_tokens=3000, ignore_eos=True)
    async with backend_of(smollm2, queued=queued, parallel=2) as backend:
        generating = backend.generate(GenerationRequest("generating", "Once upon a time", options))
        async with contextlib.aclosing(generating):
            while not (await anext(generating)).tokens:  # its first token: from here on it has one in every step
                pass
            beside = len(widths)
            _, end = await reply(backend, LONG_PROMPT, 1)
            assert end.timings is not None and end.timings.prompt_n > 1024
            during = widths[beside:]
    assert max(during) == 1 + chunk  # its token and a chunk of the prompt
    assert sum(w - 1 for w in during) >= end.timings.prompt_n  # every prompt token came beside one of its tokens
