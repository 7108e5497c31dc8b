"""The llama.cpp backend: GGUF models through llama-cpp-python, served by one inference thread per model."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

import llama_cpp.llama_cpp as lc

from localinfer.backends.base import (
    Backend,
    Capabilities,
    DecodeStats,
    EmbeddingInput,
    EmbeddingResult,
    LoadSpec,
    LoraState,
    ModelFacts,
    RerankResult,
    SlotFile,
    SlotInfo,
    SlotUsage,
    TokenPiece,
)
from localinfer.backends.checks import check_bounds, check_ids
from localinfer.backends.chunks import ChunkQueue, relay
from localinfer.backends.line_limits import text_stream_for
from localinfer.backends.llamacpp.constraint import ConstraintCompiler
from localinfer.backends.llamacpp.draft_model import DraftModel
from localinfer.backends.llamacpp.drafting import drafting
from localinfer.backends.llamacpp.embedder import Embedder, check_prompt, fit
from localinfer.backends.llamacpp.job import Job
from localinfer.backends.llamacpp.lora import LoraAdapters, check_adapter_files, no_adapters
from localinfer.backends.llamacpp.media import MediaSpans, Projector, media_prompt, without_shifts
from localinfer.backends.llamacpp.model import LlamaModel, check_attention
from localinfer.backends.llamacpp.prompt_lookup import NgramPool
from localinfer.backends.llamacpp.rerank import rerank_prompts
from localinfer.backends.llamacpp.sampling import build_sampler, is_greedy_alone, resolve_logit_bias, token_bias
from localinfer.backends.llamacpp.slot_files import SlotAction
from localinfer.backends.llamacpp.speculative import PromptDraftFactory
from localinfer.backends.llamacpp.step_costs import StepCosts
from localinfer.backends.llamacpp.step_loop import StepLoop
from localinfer.backends.llamacpp.thinking_budget import thinking_cutter
from localinfer.errors import ContextLengthExceeded, InvalidRequest, ModelNotReady
from localinfer.types import (
    PRIORITY_RANK,
    GenerationOptions,
    GenerationRequest,
    MediaPart,
    TokenStream,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class LlamaCppBackend(Backend):
    name: ClassVar[str] = "llamacpp"
    capabilities: ClassVar[Capabilities] = Capabilities(
        formats=("gguf",),
        grammar=True,
        gbnf=True,
        logit_bias=True,
        batching=True,
        token_prompts=True,
        kv_cache_types=True,
        speculative=True,
        tokenize=True,
        embed=True,
        rerank=True,
        slot_files=True,
        thinking_budget=True,
        lora=True,
    )

    def __init__(
        self,
        *,
        draft_source: PromptDraftFactory | None = None,
        drafting_slots: int | None = None,
        step_costs: StepCosts | None = None,
        queued_decode: bool | None = None,
    ) -> None:
        """``draft_source`` makes each request's speculative drafts without a draft model (None: prompt lookup
        over the request's text and, unless the request is greedy or seeded, the model's recent outputs; tests give
        others); drafts are fed while at most
        ``drafting_slots`` slots generate (None: as the device suits, ``drafting``), cut to the length
        ``step_costs`` says pays (None: a table measured as the loop runs, and a rule for greedy and seeded requests,
        whose drafts must not depend on timings; tests give fixed ones, for both). ``queued_decode``: the step
        loop's way for a GPU, or not (None: as the model is placed; tests on a CPU take the GPU's way: StepLoop)."""
        self._draft_source = draft_source
        self._drafting_slots = drafting_slots
        self._step_costs = step_costs
        self._queued_decode = queued_decode
        self._model: LlamaModel | None = None
        self._draft_model: DraftModel | None = None
        self._adapters: LoraAdapters | None = None  # the model's LoRA adapters, when it was loaded with some
        self._loop: StepLoop | None = None
        self._facts: ModelFacts | None = None
        self._constraints: ConstraintCompiler | None = None
        self._longest_token = 1
        self._embedder: Embedder | None = None  # made on the first embedding request
        self._embedding = asyncio.Lock()  # one embedding decode at a time; unload waits for it
        self._projector: Projector | None = None  # what lets it see or hear (--mmproj)
        self._name = ""

    async def load(self, spec: LoadSpec) -> None:
        model = await asyncio.to_thread(LlamaModel.load, spec)
        self._name = spec.name or spec.path.name
        try:
            if spec.lora:
                assert model.model is not None, "a loaded model has its weights"
                self._adapters = await asyncio.to_thread(LoraAdapters, model.model, spec.lora)
            if spec.mmproj is not None:
                self._projector = await asyncio.to_thread(Projector.load, spec, model)
                without_shifts(model)
            if spec.speculation == "draft":
                self._draft_model = await asyncio.to_thread(DraftModel.load, spec, model)
        except BaseException:
            if self._adapters is not None:
                self._adapters.free()
                self._adapters = None
            if self._projector is not None:
                self._projector.free()
                self._projector = None
            model.free()
            raise
        self._facts = model.facts()
        if self._projector is not None:
            self._facts = dataclasses.replace(self._facts, modalities=self._projector.modalities)
        loaded_with = (self._draft_model.model_bytes if self._draft_model else 0) + (
            self._adapters.bytes if self._adapters else 0
        )  # a draft model's weights and adapters are loaded for this model: /api/ps counts them
        self._facts = dataclasses.replace(self._facts, model_bytes=self._facts.model_bytes + loaded_with)
        self._longest_token = await asyncio.to_thread(model.longest_token)
        self._model = model
        self._constraints = ConstraintCompiler(model.vocab)
        source = self._draft_source or NgramPool()  # recent outputs shared by the model's requests
        how = drafting(spec, model, source, self._draft_model, self._drafting_slots, self._step_costs)
        if how is not None and spec.flash_attn == "off":
            log.warning(
                "%s: drafts are verified with plain attention (--flash-attn off), which computes a step of several "
                "tokens with another kernel, so greedy output may differ from --spec off and from run to run; add "
                "--spec off for the same text",
                spec.path.name,
            )
        self._loop = StepLoop(
            model,
            max_queue=spec.max_queue,
            drafting=how,
            costs=self._step_costs,
            adapters=self._adapters,
            projector=self._projector,
            queued_decode=self._queued_decode,
        )
        self._loop.start()

    def preflight(self, spec: LoadSpec) -> None:
        check_attention(spec)
        check_adapter_files(spec.lora)
        if spec.speculation == "draft":
            DraftModel.check(spec)

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
        media: MediaSpans | None = None
        if request.media:
            prompt, media = await media_prompt(
                self._projector, model, request, name=self._name, longest_token=self._longest_token
            )
        elif request.tokens:
            prompt = list(request.tokens)
            check_ids(prompt, lc.llama_vocab_n_tokens(model.vocab), param="prompt")
        else:
            prompt = await self._tokenize_prompt(model, request)
        try:
            if not prompt:
                raise InvalidRequest("the prompt is empty", param="prompt")
            if len(prompt) >= model.n_ctx:
                raise ContextLengthExceeded(n_prompt=len(prompt), n_ctx=model.n_ctx)
        except BaseException:
            if media is not None:
                media.free()
            raise
        async for chunk in self._generate(model, loop, request, options, prompt, media):
            yield chunk

    async def _generate(
        self,
        model: LlamaModel,
        loop: StepLoop,
        request: GenerationRequest,
        options: GenerationOptions,
        prompt: list[int],
        media: MediaSpans | None,
    ) -> TokenStream:
        sampling = resolve_logit_bias(
            options.sampling,
            tokenize=functools.partial(model.tokenize, add_special=False, parse_special=False),
            n_vocab=lc.llama_vocab_n_tokens(model.vocab),
            banned=self.facts.eog_ids if options.ignore_eos else (),  # as llama-server's ignore_eos
        )
        constraint = None
        if options.response_format.type != "text" and self._constraints is not None:
            constraint = await asyncio.to_thread(self._constraints.compile, options.response_format)
        sampler = build_sampler(lc.llama_vocab_n_tokens(model.vocab), sampling, constraint, vocab=model.vocab)
        chunks: ChunkQueue = asyncio.Queue()
        job = Job(
            request_id=request.request_id,
            prompt=prompt,
            sampler=sampler,
            greedy=is_greedy_alone(sampler),
            reproducible=sampling.reproducible,
            greedy_bias=token_bias(sampling),
            max_tokens=options.max_tokens,
            ignore_eos=options.ignore_eos,
            cache_prompt=options.cache_prompt,
            n_logprobs=options.logprobs,
            logprobs_of_end=options.logprobs_of_end,
            logprobs_after_sampling=options.logprobs_after_sampling,
            timings_per_token=options.timings_per_token,
            return_progress=options.return_progress,
            priority=PRIORITY_RANK[request.priority],
            deliver=loop.outbox.delivery(asyncio.get_running_loop(), chunks),
            text=constraint.text_stream(options.stop) if constraint else text_stream_for(options),
            thinking=thinking_cutter(model, options.thinking_budget),
            n_keep=options.n_keep,
            lora=self._adapters.for_request(options.lora) if self._adapters else no_adapters(options.lora),
            media=media,
        )
        loop.submit(job)  # raises QueueFull (and frees the sampler) when the slots and the queue are taken
        try:
            async for chunk in relay(chunks):
                yield chunk
        finally:
            job.cancelled = True

    def _media_prompt(self, model: LlamaModel, request: GenerationRequest) -> Awaitable[tuple[list[int], MediaSpans]]:
        return media_prompt(self._projector, model, request, name=self._name, longest_token=self._longest_token)

    async def _tokenize_prompt(self, model: LlamaModel, request: GenerationRequest) -> list[int]:
        # a character is at least a byte: a prompt of more characters than the context's tokens could cover is too
        # long whatever it says, and is refused without tokenizing (or even encoding) megabytes
        fewest = -(-len(request.prompt) // self._longest_token)
        if fewest >= model.n_ctx:
            raise ContextLengthExceeded(n_prompt=fewest, n_ctx=model.n_ctx, at_least=True)
        # llama_tokenize runs without Python's lock: a long prompt does not stall other requests or /health
        return await asyncio.to_thread(
            model.tokenize, request.prompt, add_special=request.add_special, parse_special=request.parse_special
        )

    async def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        model, _ = self._loaded()
        return await asyncio.to_thread(model.tokenize, text, add_special=add_special, parse_special=parse_special)

    async def count_media_prompt(self, text: str, media: Sequence[MediaPart], *, add_special: bool) -> int:
        request = GenerationRequest("count", text, GenerationOptions(), add_special=add_special, media=tuple(media))
        prompt, spans = await self._media_prompt(self._loaded()[0], request)
        spans.free()
        return len(prompt)

    async def detokenize(self, tokens: Sequence[int]) -> list[TokenPiece]:
        model, _ = self._loaded()
        check_ids(tokens, lc.llama_vocab_n_tokens(model.vocab), param="tokens")  # llama.cpp reads past its table

        def pieces() -> list[TokenPiece]:
            return [TokenPiece(token, model.token_bytes(token, special=True)) for token in tokens]

        return await asyncio.to_thread(pieces)

    async def embed(
        self, inputs: Sequence[EmbeddingInput], *, normalize: bool, truncate: bool = False
    ) -> EmbeddingResult:
        model, _ = self._loaded()
        n_vocab = lc.llama_vocab_n_tokens(model.vocab)
        keep_last = bool(lc.llama_vocab_get_add_eos(model.vocab) or lc.llama_vocab_get_add_sep(model.vocab))
        prompts = await self._embedding_tokens(model, inputs, truncate=truncate)
        for index, prompt in enumerate(prompts):
            check_prompt(prompt, n_vocab, index=index)
            if truncate:
                prompts[index] = fit(prompt, n_ctx=model.n_ctx, keep_last=keep_last)
            elif len(prompt) > model.n_ctx:
                raise ContextLengthExceeded(n_prompt=len(prompt), n_ctx=model.n_ctx, param="input")
        n_tokens = tuple(len(p) for p in prompts)
        if model.pooling == "none":  # llama-server's --pooling none: a vector per token, none pooled nor normalised
            rows = []
            for prompt in prompts:
                async with self._embedding:
                    embedder = self._embedder_for(model)
                    rows.append(await asyncio.to_thread(embedder.embed_tokens, prompt))
            return EmbeddingResult(vectors=(), n_tokens=n_tokens, token_vectors=tuple(rows))
        vectors: list[tuple[float, ...]] = []
        for prompt in prompts:
            async with self._embedding:  # taken per input: a long request does not hold off the others for long
                embedder = self._embedder_for(model)
                vectors.append(await asyncio.to_thread(embedder.embed, prompt, normalize=normalize))
        return EmbeddingResult(vectors=tuple(vectors), n_tokens=n_tokens)

    async def rerank(self, query: str, documents: Sequence[str]) -> RerankResult:
        model, _ = self._loaded()
        for document in documents:  # a pair too long whatever it says is refused without tokenizing megabytes
            fewest = -(-(len(query) + len(document)) // self._longest_token)
            if fewest > model.n_ctx:
                raise ContextLengthExceeded(n_prompt=fewest, n_ctx=model.n_ctx, at_least=True, param="documents")
        prompts = await asyncio.to_thread(rerank_prompts, model, query, documents)
        for index, prompt in enumerate(prompts):
            if not prompt:
                raise InvalidRequest(
                    f"documents[{index}]: the query and the document are both empty", param="documents"
                )
            if len(prompt) > model.n_ctx:
                raise ContextLengthExceeded(n_prompt=len(prompt), n_ctx=model.n_ctx, param="documents")
        scores: list[float] = []
        for prompt in prompts:
            async with self._embedding:  # taken per pair, as for embeddings
                embedder = self._embedder_for(model)
                scores.append(await asyncio.to_thread(embedder.score, prompt))
        return RerankResult(scores=tuple(scores), n_tokens=tuple(len(p) for p in prompts))

    def _embedder_for(self, model: LlamaModel) -> Embedder:
        """The embedding context (made on first use, in the decode's thread); ModelNotReady once unloaded."""
        if self._model is not model:
            raise ModelNotReady("the model was unloaded")
        if self._embedder is None:
            self._embedder = Embedder(model)
        return self._embedder

    async def _embedding_tokens(
        self, model: LlamaModel, inputs: Sequence[EmbeddingInput], *, truncate: bool
    ) -> list[list[int]]:
        """Each input's token ids: a text tokenized as llama-server does for embeddings (special tokens added and
        parsed), in one worker thread; ids as they are. Raises InvalidRequest for an empty text, and without
        ``truncate`` ContextLengthExceeded for a text too long to fit whatever it says."""
        for index, given in enumerate(inputs):
            if isinstance(given, str) and not given:
                raise InvalidRequest(f"input[{index}] is empty", param="input")
            fewest = -(-len(given) // self._longest_token) if isinstance(given, str) else 0
            if not truncate and fewest > model.n_ctx:  # refused without tokenizing megabytes
                raise ContextLengthExceeded(n_prompt=fewest, n_ctx=model.n_ctx, at_least=True, param="input")

        def tokens() -> list[list[int]]:
            return [
                model.tokenize(given, add_special=True, parse_special=True) if isinstance(given, str) else list(given)
                for given in inputs
            ]

        return await asyncio.to_thread(tokens)

    def slots(self) -> list[SlotInfo]:
        return self._loop.slots() if self._loop is not None else []

    def decode_stats(self) -> DecodeStats | None:
        return self._loop.stats if self._loop is not None else None

    def lora_adapters(self) -> tuple[LoraState, ...]:
        return self._adapters.states() if self._adapters is not None else ()

    async def set_lora_scales(self, scales: Mapping[int, float]) -> None:
        self._loaded()
        if self._adapters is None:
            no_adapters(tuple(scales.items()))
            return
        self._adapters.set_scales(scales)

    async def save_slot(self, id_slot: int, path: Path) -> SlotFile:
        return await self._slot_action(SlotAction("save", id_slot, path), SlotFile)

    async def restore_slot(self, id_slot: int, path: Path) -> SlotFile:
        return await self._slot_action(SlotAction("restore", id_slot, path), SlotFile)

    async def erase_slot(self, id_slot: int) -> int:
        return await self._slot_action(SlotAction("erase", id_slot), int)

    async def _slot_action(self, action: SlotAction, result: type[T]) -> T:
        """``action``'s result, once the step loop ran it between two steps (slot_files.py)."""
        _, loop = self._loaded()
        done = await asyncio.wrap_future(loop.act(action))  # cancelled with its requester while it still waits
        assert isinstance(done, result)
        return done

    async def unload(self) -> None:
        async with self._embedding:  # after the embedding decode under way; the next one finds no model
            if self._embedder is not None:
                await asyncio.to_thread(self._embedder.free)  # waits for a decode whose requester left
                self._embedder = None
            if self._loop is not None:
                await asyncio.to_thread(self._loop.stop)
                self._loop = None
            self._constraints = None
            if self._draft_model is not None:  # after the loop, which drafts with it, has stopped
                self._draft_model.free()
                self._draft_model = None
            if self._adapters is not None:  # after the loop, whose context applies them
                self._adapters.free()
                self._adapters = None
            if self._projector is not None:  # after the loop, which decodes with it
                self._projector.free()
                self._projector = None
            if self._model is not None:
                self._model.free()
                self._model = None

    def slot_usage(self) -> SlotUsage:
        if self._loop is None:
            return SlotUsage()
        return self._loop.usage()
