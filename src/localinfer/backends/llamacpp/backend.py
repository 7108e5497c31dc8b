"""The llama.cpp backend: GGUF models through llama-cpp-python, served by one inference thread per model."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import llama_cpp.llama_cpp as lc

from localinfer.backends.base import Backend, Capabilities, LoadSpec, ModelFacts, SlotUsage, check_bounds
from localinfer.backends.chunks import ChunkQueue, relay
from localinfer.backends.line_limits import text_stream_for
from localinfer.backends.llamacpp.constraint import ConstraintCompiler
from localinfer.backends.llamacpp.job import Job
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.sampling import build_sampler
from localinfer.backends.llamacpp.step_loop import StepLoop
from localinfer.errors import ContextLengthExceeded, InvalidRequest, ModelNotReady
from localinfer.types import GenerationRequest, TokenStream


class LlamaCppBackend(Backend):
    name: ClassVar[str] = "llamacpp"
    capabilities: ClassVar[Capabilities] = Capabilities(formats=("gguf",), grammar=True, batching=True)

    def __init__(self) -> None:
        self._model: LlamaModel | None = None
        self._loop: StepLoop | None = None
        self._facts: ModelFacts | None = None
        self._constraints: ConstraintCompiler | None = None
        self._longest_token = 1

    async def load(self, spec: LoadSpec) -> None:
        model = await asyncio.to_thread(LlamaModel.load, spec)
        self._facts = model.facts()
        self._longest_token = await asyncio.to_thread(model.longest_token)
        self._model = model
        self._constraints = ConstraintCompiler(model.vocab)
        self._loop = StepLoop(model, max_queue=spec.max_queue)
        self._loop.start()

    @property
    def facts(self) -> ModelFacts:
        if self._facts is None:
            raise ModelNotReady("the model is not loaded yet")
        return self._facts

    def _loaded(self) -> tuple[LlamaModel, StepLoop]:
        if self._model is None or self._loop is None:
            raise ModelNotReady("the model is not loaded yet", hint="retry when GET /health answers 200")
        return self._model, self._loop

    async def generate(self, request: GenerationRequest) -> TokenStream:
        model, loop = self._loaded()
        options = check_bounds(request.options, n_ctx=model.n_ctx, n_vocab=lc.llama_vocab_n_tokens(model.vocab))
        # a character is at least a byte: a prompt of more characters than the context's tokens could cover is too
        # long whatever it says, and is refused without tokenizing (or even encoding) megabytes
        fewest = -(-len(request.prompt) // self._longest_token)
        if fewest >= model.n_ctx:
            raise ContextLengthExceeded(n_prompt=fewest, n_ctx=model.n_ctx, at_least=True)
        # llama_tokenize runs without Python's lock: a long prompt does not stall other requests or /health
        prompt = await asyncio.to_thread(
            model.tokenize, request.prompt, add_special=request.add_special, parse_special=request.parse_special
        )
        if not prompt:
            raise InvalidRequest("the prompt is empty", param="prompt")
        if len(prompt) >= model.n_ctx:
            raise ContextLengthExceeded(n_prompt=len(prompt), n_ctx=model.n_ctx)
        constraint = None
        if options.response_format.type != "text" and self._constraints is not None:
            constraint = await asyncio.to_thread(self._constraints.compile, options.response_format)
        sampler = build_sampler(lc.llama_vocab_n_tokens(model.vocab), options.sampling, constraint, vocab=model.vocab)
        chunks: ChunkQueue = asyncio.Queue()
        job = Job(
            request_id=request.request_id,
            prompt=prompt,
            sampler=sampler,
            max_tokens=options.max_tokens,
            ignore_eos=options.ignore_eos,
            cache_prompt=options.cache_prompt,
            deliver=loop.outbox.delivery(asyncio.get_running_loop(), chunks),
            text=constraint.text_stream(options.stop) if constraint else text_stream_for(options),
        )
        loop.submit(job)  # raises QueueFull (and frees the sampler) when the slots and the queue are taken
        try:
            async for chunk in relay(chunks):
                yield chunk
        finally:
            job.cancelled = True

    async def unload(self) -> None:
        if self._loop is not None:
            await asyncio.to_thread(self._loop.stop)
            self._loop = None
        self._constraints = None
        if self._model is not None:
            self._model.free()
            self._model = None

    def slot_usage(self) -> SlotUsage:
        if self._loop is None:
            return SlotUsage()
        return self._loop.usage()
