"""The engine facade: named models in, token streams out. Routes and the TUI see only this.

Models are loaded on first use (or ahead, with ``preload``) and unloaded when idle past their keep-alive or when
another needs the room: ``engine/scheduler.py`` decides, with what each takes from ``engine/load_plan.py``, which
also says how each loads. Each request is made a generation request by ``engine/prompting.py`` (chat template,
stop strings, thinking) and handed to the model's backend; the request counts as the model's in flight until its
stream ends.

It is over 450 lines: it is the one surface routes, clients and the app see, one short method for each thing they ask
of a model (generate, embed, rerank, tokenize, slots, adapters, load, unload, list); what each method delegates to
lives in its own module.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from localinfer.backends.base import (
    Backend,
    EmbeddingInput,
    EmbeddingResult,
    LoraState,
    ModelFacts,
    Relay,
    RerankResult,
    SlotFile,
    SlotInfo,
    SlotUsage,
    TokenPiece,
)
from localinfer.backends.checks import check_supported, not_a_reranker, reranker_refusal
from localinfer.backends.registry import (
    DEFAULT_BACKENDS,
    RELAYED_FORMATS,
    BackendFactories,
    BackendFactory,
    backend_for,
)
from localinfer.config import Settings
from localinfer.engine import slot_folder
from localinfer.engine.device_memory import MachineMemory
from localinfer.engine.inflight import InFlight
from localinfer.engine.load_plan import LoadPlanner, ServedAs
from localinfer.engine.metrics import EngineMetrics
from localinfer.engine.profiles import trained_context
from localinfer.engine.prompting import chat_prompt, completion_generation, infill_generation, rendered_chat
from localinfer.engine.scheduler import Clock, MemoryProbe, Runner, Scheduler
from localinfer.engine.templates import RenderedPrompt, chat_template
from localinfer.errors import (
    InvalidRequest,
    LocalInferError,
    ModelNotFound,
    ServerShuttingDown,
)
from localinfer.hardware.profile import HardwareProfile
from localinfer.hardware.rpc_devices import RemoteDevice
from localinfer.models.defaults import NO_DEFAULTS, ModelDefaults
from localinfer.models.projector import modalities
from localinfer.models.store import Manifest, ModelSource
from localinfer.types import (
    ChatRequest,
    CompletionRequest,
    GenerationRequest,
    InfillRequest,
    MediaPart,
    ModelInfo,
    TokenStream,
)

log = logging.getLogger(__name__)

Health = Literal["ready", "loading", "error"]
T = TypeVar("T")


class Engine:
    def __init__(
        self,
        settings: Settings,
        models: ModelSource,
        backend_factory: BackendFactory | BackendFactories = DEFAULT_BACKENDS,
        *,
        hardware: HardwareProfile | None = None,
        clock: Clock = time.monotonic,
        free_memory: MemoryProbe | None = None,
        served_as: Mapping[str, ServedAs] | None = None,
        rpc_devices: tuple[RemoteDevice, ...] = (),
    ) -> None:
        """Each model is served by the backend its format maps to in ``backend_factory`` (llama.cpp for GGUF,
        ONNX Runtime for ONNX), or by the one factory given. With ``hardware``, each model loads as the planner
        says (GPU layers, context, slots, threads, ONNX Runtime provider), except where the settings say
        otherwise; without, as the settings say. ``clock`` and ``free_memory`` (default: the machine's) are the
        scheduler's. ``served_as`` says how the models it names are served otherwise than their files say (the
        model ``serve`` was started with: ``--chat-template``, ``--pooling``). ``rpc_devices``: the RPC workers'
        devices with the memory each offered when ``serve`` started (before any model took some), which the
        planner splits GGUF models' layers by; without, it counts the workers only."""
        self._settings = settings
        self._models = models
        self._backend_factory = backend_factory
        self._plans = LoadPlanner(settings, models, hardware=hardware, served_as=served_as, rpc_devices=rpc_devices)
        self._scheduler = Scheduler(
            self._new_runner,
            self._load,
            self._unload,
            estimate=self._plans.estimate,
            free_memory=free_memory or MachineMemory(hardware, lambda: [r.need for r in self._scheduler.runners()]),
            clock=clock,
            max_loaded=settings.max_loaded,
            keep_alive=settings.keep_alive_seconds,
        )
        self._reaper: asyncio.Task[None] | None = None
        self._shutting_down = False
        self._in_flight = InFlight()
        self._closing = asyncio.Lock()
        self.metrics = EngineMetrics(self._usage_by_model)

    def model_defaults(self, model: str) -> ModelDefaults:
        """What ``model`` runs with unless a request says otherwise (its Modelfile's); none for a name that is no
        model (the request fails on its own)."""
        try:
            return self.manifest_of(model).defaults
        except LocalInferError:
            return NO_DEFAULTS

    def manifest_of(self, model: str) -> Manifest:
        """The manifest ``model`` is (or would be) loaded from. Raises ModelNotFound."""
        runner = self._scheduler.get(model)
        return runner.manifest if runner is not None else self._models.resolve(model)

    def check_plan(self, manifest: Manifest) -> None:
        """Plan ``manifest``'s load now, and let its backend check what it can without loading, so that a model
        this machine cannot run (vLLM's without its GPU) or a draft model of another vocabulary fails before it is
        served; the plan is logged when the model loads. Raises ModelLoadError."""
        spec = self._plans.spec(manifest, None, explain=False)
        backend_for(manifest, self._backend_factory).preflight(spec)

    def preload(self, manifest: Manifest, *, ctx_size: int | None = None, pin: bool = False) -> Runner:
        """Start loading ``manifest`` in the background (``health`` says ``loading`` until it is done), with a
        context of ``ctx_size`` tokens instead of the configured one when given; ``pin``: never unloaded for room
        or by keep-alive."""
        self._start_reaper()
        return self._scheduler.start(manifest, ctx_size=ctx_size, pin=pin)

    def _new_runner(self, manifest: Manifest, ctx_size: int | None) -> Runner:
        backend = backend_for(manifest, self._backend_factory)
        return Runner(manifest, backend, asyncio.get_running_loop().create_future(), ctx_size)

    async def _load(self, runner: Runner) -> None:
        manifest = runner.manifest
        self._plans.check_kv_cache_types(manifest, runner.backend)
        await runner.backend.load(self._plans.spec(manifest, runner.ctx_size))
        self.metrics.track(manifest.name, runner.backend.decode_stats())
        override = self._plans.served(manifest.name).chat_template or manifest.defaults.template
        runner.template = chat_template(runner.backend.facts, override)
        facts = runner.backend.facts
        log.info(
            "model %s ready: %s, %d slots of %d tokens, chat template: %s",
            runner.manifest.name,
            facts.architecture,
            facts.n_slots,
            facts.n_ctx,
            runner.template.kind,
        )

    async def _unload(self, runner: Runner) -> None:
        await runner.backend.unload()

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._scheduler.run_reaper(), name="keep-alive")

    async def _acquire(self, model: str, *, keep_alive: float | None = None, ctx_size: int | None = None) -> Runner:
        if self._shutting_down:
            raise ServerShuttingDown()
        self._start_reaper()
        runner = self._scheduler.get(model)
        if runner is not None:
            return await self._scheduler.acquire(runner.manifest, keep_alive=keep_alive, ctx_size=ctx_size)
        name = self._models.resolve(model).name  # a ModelNotFound now; the manifest is looked up again to load
        return await self._scheduler.acquire(
            lambda: self._models.resolve(name), keep_alive=keep_alive, ctx_size=ctx_size
        )

    @asynccontextmanager
    async def _using(self, model: str, *, keep_alive: float | None = None) -> AsyncIterator[Runner]:
        """``model``'s loaded runner, counted in flight while the block runs."""
        runner = await self._acquire(model, keep_alive=keep_alive)
        try:
            yield runner
        finally:
            self._scheduler.release(runner)

    async def _with_runner(
        self, model: str, use: Callable[[Runner], Awaitable[T]], *, keep_alive: float | None = None
    ) -> T:
        async with self._using(model, keep_alive=keep_alive) as runner:
            return await use(runner)

    async def runner(self, model: str, *, keep_alive: float | None = None) -> Runner:
        """The loaded runner for ``model``, loading it on first use (its keep-alive then starts; ``keep_alive``
        replaces the model's). Raises ModelNotFound, ModelLoadError, and ServerShuttingDown once ``shutdown``
        began."""
        runner = await self._acquire(model, keep_alive=keep_alive)
        self._scheduler.release(runner)
        return runner

    async def load(self, model: str, *, ctx_size: int | None = None) -> None:
        """Load ``model`` with a context of at least ``ctx_size`` tokens (None: the configured one). A loaded model
        with a shorter context is loaded again with this one when no request is in flight on it, as Ollama does
        for ``num_ctx``; a loaded one with a longer context is kept."""
        runner = await self._acquire(model, ctx_size=ctx_size)
        self._scheduler.release(runner)

    async def wait_unloads(self) -> None:
        """Wait for the unloads under way (keep-alive, eviction, ``unload_when_idle``)."""
        await self._scheduler.wait_unloads()

    def unload_when_idle(self, model: str) -> bool:
        """Unload ``model`` once its requests in flight end (at once when there are none), as Ollama's
        ``keep_alive: 0``; False when it is not loaded. Raises ModelNotFound for a name that is no model."""
        runner = self._scheduler.get(model)
        return self._scheduler.unload_when_idle(runner.name if runner else self._models.resolve(model).name)

    async def relay(self, model: str) -> Relay | None:
        """The proxy to the engine process serving ``model`` when its backend is one (vLLM...), whose OpenAI routes
        a server relays as they are, each answer counted in ``metrics``; it is loaded first. None for a model
        served in this process, or a name that is not a model (the caller's own routes answer those). Raises
        ModelLoadError when it fails to load."""
        runner = self._scheduler.get(model)
        if runner is None:
            try:
                manifest = self._models.resolve(model)
            except LocalInferError:
                return None
            if manifest.format not in RELAYED_FORMATS:
                return None
        elif runner.manifest.format not in RELAYED_FORMATS:
            return None
        runner = await self.runner(model)
        relay = runner.backend.relay
        return self.metrics.metered(runner.manifest.name, relay) if relay is not None else None

    def health(self) -> Health:
        """``loading`` while a model loads, else ``ready`` (models load on demand: none loaded is ready too)."""
        return "loading" if self._scheduler.is_loading() else "ready"

    def rpc_workers(self) -> dict[str, tuple[str, list[str]]]:
        """Each RPC worker a loaded model's layers are on: ``lost`` when one of those models found it gone, else
        ``ok``, and the models on it."""
        workers: dict[str, tuple[str, list[str]]] = {}
        for runner in self._scheduler.runners():
            for worker in runner.backend.rpc_workers():
                state, models = workers.get(worker.endpoint, ("ok", []))
                workers[worker.endpoint] = ("lost" if "lost" in (state, worker.state) else "ok", [*models, runner.name])
        return workers

    def slot_usage(self) -> SlotUsage:
        return sum((r.backend.slot_usage() for r in self._scheduler.runners() if r.is_ready), SlotUsage())

    def _usage_by_model(self) -> dict[str, SlotUsage]:
        return {r.name: r.backend.slot_usage() for r in self._scheduler.runners() if r.is_ready}

    async def facts(self, model: str) -> ModelFacts:
        """What the loaded ``model`` is (context, slots, chat template), loading it on first use."""
        return (await self.runner(model)).backend.facts

    def slot_folder(self) -> Path:
        """Where slots are saved (--slot-save-path). Raises NotSupported when the server was started without it."""
        return slot_folder.slot_folder(self._settings.slot_save_path)

    async def save_slot(self, model: str, id_slot: int, filename: str) -> SlotFile:
        """Save slot ``id_slot`` of ``model`` (loaded first when it is not) to ``filename`` in the slot folder, once
        the slot holds no request. Raises NotSupported without a slot folder or for a backend that cannot,
        InvalidRequest for a bad file name or slot, SlotFileError when the file cannot be written."""
        path = slot_folder.slot_file(self.slot_folder(), filename)
        return await self._with_runner(
            model, lambda r: slot_folder.check_slot_files(r.backend, r.name).save_slot(id_slot, path)
        )

    async def restore_slot(self, model: str, id_slot: int, filename: str) -> SlotFile:
        """Restore slot ``id_slot`` of ``model`` from ``filename`` in the slot folder, as ``save_slot``; a file that
        cannot be restored is an InvalidRequest, and leaves the slot empty."""
        path = slot_folder.slot_file(self.slot_folder(), filename)
        return await self._with_runner(
            model, lambda r: slot_folder.check_slot_files(r.backend, r.name).restore_slot(id_slot, path)
        )

    async def erase_slot(self, model: str, id_slot: int) -> int:
        """Empty slot ``id_slot``'s cache, as ``save_slot``; the tokens it held."""
        self.slot_folder()
        return await self._with_runner(
            model, lambda r: slot_folder.check_slot_files(r.backend, r.name).erase_slot(id_slot)
        )

    async def lora_adapters(self, model: str) -> tuple[LoraState, ...]:
        """The LoRA adapters ``model`` (loaded first when it is not) was loaded with, and their global scales."""
        return (await self.runner(model)).backend.lora_adapters()

    async def set_lora_scales(self, model: str, scales: Mapping[int, float]) -> None:
        """Set ``model``'s global adapter scales (adapters left out: 0), as llama-server's POST /lora-adapters.
        Raises InvalidRequest for an unknown id, NotSupported for a backend without adapters."""
        await self._with_runner(model, lambda r: r.backend.set_lora_scales(scales))

    def slots(self, model: str) -> list[SlotInfo]:
        """What each slot of ``model`` does now; empty when it is not loaded or its backend has no slots."""
        runner = self._scheduler.get(model)
        return runner.backend.slots() if runner is not None and runner.is_ready else []

    async def tokenize(self, model: str, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """``text`` as ``model``'s token ids. Raises InvalidRequest where its backend cannot tokenize."""
        return await self._with_runner(
            model,
            lambda r: _able(r, "tokenize", "tokenizing").tokenize(
                text, add_special=add_special, parse_special=parse_special
            ),
        )

    async def count_media_prompt(self, model: str, text: str, media: Sequence[MediaPart], *, add_special: bool) -> int:
        """How many tokens ``text`` is for ``model`` with ``media`` in place of its media markers (an image as the
        tokens its projector makes of it). Raises InvalidRequest where the model takes no media."""
        return await self._with_runner(
            model, lambda r: r.backend.count_media_prompt(text, media, add_special=add_special)
        )

    async def detokenize(self, model: str, tokens: Sequence[int]) -> list[TokenPiece]:
        """Each of ``tokens`` with the bytes it stands for in ``model``. Raises InvalidRequest for an id outside
        its vocabulary."""
        return await self._with_runner(model, lambda r: _able(r, "tokenize", "detokenizing").detokenize(tokens))

    async def embed(
        self,
        model: str,
        inputs: Sequence[EmbeddingInput],
        *,
        normalize: bool = True,
        truncate: bool = False,
        keep_alive: float | None = None,
    ) -> EmbeddingResult:
        """One vector per input (a text, or token ids), in order, from ``model`` pooled as its metadata says (mean
        for a generative model), L2-normalised when ``normalize``; an input past the context is cut to it when
        ``truncate``. Raises InvalidRequest (an empty input, an id outside the vocabulary, a backend that cannot
        embed, a reranker), ContextLengthExceeded, and what loading ``model`` raises."""

        async def embed(runner: Runner) -> EmbeddingResult:
            if runner.backend.facts.reranker:
                raise reranker_refusal(f"model '{runner.name}'", "embed texts")
            return await _able(runner, "embed", "embedding").embed(inputs, normalize=normalize, truncate=truncate)

        return await self._with_runner(model, embed, keep_alive=keep_alive)

    async def rerank(
        self, model: str, query: str, documents: Sequence[str], *, keep_alive: float | None = None
    ) -> RerankResult:
        """Each document's relevance score for ``query``, in the documents' order, from ``model``, a reranker (its
        metadata states rank pooling), each pair laid out and scored alone as llama-server scores it. Raises
        InvalidRequest (a model that is no reranker, a pair with no tokens), ContextLengthExceeded, and what
        loading ``model`` raises."""

        async def rerank(runner: Runner) -> RerankResult:
            if not runner.backend.facts.reranker:
                raise not_a_reranker(f"model '{runner.name}'")
            return await _able(runner, "rerank", "reranking").rerank(query, documents)

        return await self._with_runner(model, rerank, keep_alive=keep_alive)

    def models(self) -> list[ModelInfo]:
        """Every model the engine can serve, with whether each is loaded: loaded ones first, then by name."""
        infos = {m.name: m for m in self._models.list()}
        infos.update({r.name: r.manifest for r in self._scheduler.runners()})
        models = [self._info(m) for m in infos.values()]
        return sorted(models, key=lambda m: (not m.loaded, m.name))

    def knows(self, model: str) -> bool:
        """Whether ``model`` names a model this engine serves (loaded or not)."""
        if self._scheduler.get(model) is not None:
            return True
        try:
            self._models.resolve(model)
        except ModelNotFound:
            return False
        return True

    def describe(self, model: str) -> ModelInfo:
        """The model named ``model``, loaded or not. Raises ModelNotFound."""
        runner = self._scheduler.get(model)
        return self._info(runner.manifest if runner is not None else self._models.resolve(model))

    def _info(self, manifest: Manifest) -> ModelInfo:
        runner = self._scheduler.get(manifest.name)
        loaded = runner is not None and runner.is_ready
        projector = self._plans.projector_path(manifest)
        return ModelInfo(
            name=manifest.name,
            path=str(manifest.path),
            size_bytes=manifest.size,
            quantization=manifest.quantization,
            source=manifest.source,
            loaded=loaded,
            created=manifest.created,
            context_length=runner.backend.facts.n_ctx if loaded and runner is not None else trained_context(manifest),
            loading=runner is not None and not runner.ready.done(),
            format=manifest.format,
            projector=str(projector) if projector is not None else None,
            modalities=modalities(projector),
        )

    def loaded(self) -> list[LoadedModel]:
        """The models loaded now, with how each runs."""
        return [
            LoadedModel(
                name=r.name,
                backend=r.backend.name,
                facts=r.backend.facts,
                need=dict(r.need),
                pinned=r.pinned,
                in_flight=r.in_flight,
                expires_in=self._scheduler.expires_in(r),
                adapters=r.backend.lora_adapters(),
            )
            for r in self._scheduler.runners()
            if r.is_ready
        ]

    async def unload(self, model: str) -> bool:
        """Unload ``model`` if it is loaded or loading (False when it was not); requests in flight end with an error."""
        return await self._scheduler.unload(model)

    async def _on_model(
        self, request: ChatRequest | CompletionRequest | InfillRequest, stream: Callable[[Runner, float], TokenStream]
    ) -> TokenStream:
        """``stream(runner, started)``'s chunks, the request counted in flight on its model (loaded first when it
        is not) until the stream ends; ``started``: when the request reached the engine (``time.perf_counter()``)."""
        started = time.perf_counter()
        async with (
            self._using(request.model, keep_alive=request.keep_alive) as runner,
            aclosing(stream(runner, started)) as chunks,
        ):
            async for chunk in chunks:
                yield chunk

    def chat(self, request: ChatRequest) -> TokenStream:
        return self._on_model(request, lambda runner, started: self._chat(runner, request, started))

    async def render(self, request: ChatRequest) -> RenderedPrompt:
        """The prompt ``chat`` would give the model for ``request``: its turns and tools through the model's chat
        template (llama-server's /apply-template). Loads the model. Raises ModelNotFound, ModelNotReady."""
        return await self._with_runner(
            request.model, lambda runner: rendered_chat(runner, request), keep_alive=request.keep_alive
        )

    async def _chat(self, runner: Runner, request: ChatRequest, started: float) -> TokenStream:
        prompt = await chat_prompt(runner, request)
        async with aclosing(prompt.reply(self._generate(runner, prompt.generation, started))) as chunks:
            async for chunk in chunks:
                yield chunk

    def complete(self, request: CompletionRequest) -> TokenStream:
        return self._on_model(request, lambda runner, started: self._complete(runner, request, started))

    async def _complete(self, runner: Runner, request: CompletionRequest, started: float) -> TokenStream:
        generation = completion_generation(runner.backend, request)
        async with aclosing(self._generate(runner, generation, started)) as chunks:
            async for chunk in chunks:
                yield chunk

    def infill(self, request: InfillRequest) -> TokenStream:
        """Fill in the text between ``request.prefix`` and ``request.suffix`` with the model's own FIM tokens, the
        prompt laid out as llama-server lays it out (``engine/infill.py``). Raises, before the first chunk,
        InvalidRequest when the model declares no FIM tokens and ContextLengthExceeded when the prompt does not
        fit."""
        return self._on_model(request, lambda runner, started: self._infill(runner, request, started))

    async def _infill(self, runner: Runner, request: InfillRequest, started: float) -> TokenStream:
        generation = await infill_generation(_able(runner, "tokenize", "fill-in-the-middle"), request)
        async with aclosing(self._generate(runner, generation, started)) as chunks:
            async for chunk in chunks:
                yield chunk

    def _generate(self, runner: Runner, generation: GenerationRequest, started: float) -> TokenStream:
        """``runner``'s stream for ``generation``, ended by ``shutdown`` and counted in ``metrics`` (``started``:
        when the request reached the engine, ``time.perf_counter()``). Raises InvalidRequest for a reranker."""
        if runner.backend.facts.reranker:
            raise reranker_refusal(f"model '{runner.name}'", "generate text")
        check_supported(runner.backend.name, runner.backend.capabilities, generation.options)
        if generation.media:
            check_media(runner.name, runner.backend, generation.media)
        chunks = self._in_flight.stream(runner.backend.generate(generation))
        return self.metrics.observe(runner.manifest.name, chunks, started=started)

    async def shutdown(self) -> None:
        """Stop serving: from now on requests are refused with ServerShuttingDown; every generation in flight (or
        waiting for a slot) ends with ServerShuttingDown at once, which its stream writer sends as the stream's
        last event; then every model is unloaded. A ``close`` meanwhile waits for that."""
        self._shutting_down = True
        self._in_flight.end(ServerShuttingDown)
        await self.close()

    async def close(self) -> None:
        """Unload every model; requests in flight end with an error. A close already under way is waited for."""
        async with self._closing:
            if self._reaper is not None:
                self._reaper.cancel()
            runners = await self._scheduler.close()
            for runner in runners:
                try:
                    if not runner.ready.done():
                        await asyncio.wait([runner.ready])
                    if runner.is_ready:
                        await runner.backend.unload()
                except (LocalInferError, asyncio.CancelledError):
                    log.warning("unloading %s failed", runner.manifest.name)


@dataclass(frozen=True)
class LoadedModel:
    name: str
    backend: str
    facts: ModelFacts
    need: Mapping[str, int]  # the scheduler's estimate of what it takes, per device
    pinned: bool = False
    in_flight: int = 0
    expires_in: float | None = None  # seconds until its keep-alive unloads it; None: in use, pinned or for good
    adapters: tuple[LoraState, ...] = ()  # the LoRA adapters loaded with it, at their global scales


def _able(runner: Runner, capability: str, what: str) -> Backend:
    """``runner``'s backend when its capabilities declare ``capability``. Raises InvalidRequest naming ``what``
    it cannot do."""
    backend = runner.backend
    if not getattr(backend.capabilities, capability):
        raise InvalidRequest(f"{what} is not supported by the {backend.name} backend of '{runner.name}'", param="model")
    return backend


def check_media(name: str, backend: Backend, media: Sequence[MediaPart]) -> None:
    """Refuse media ``name``'s backend cannot take: a model without a projector, or one whose engine is relayed
    (vLLM takes images on the OpenAI routes, relayed to it as they are)."""
    kinds = sorted({part.kind for part in media})
    taken = {"image": "vision", "audio": "audio"}
    if all(taken[kind] in backend.facts.modalities for kind in kinds):
        return
    what = " or ".join(kinds)
    if backend.name != "llamacpp":
        raise InvalidRequest(
            f"model '{name}' takes {what} input on the OpenAI routes only, which relay it to {backend.name}",
            param="messages",
            hint="send the request to /v1/chat/completions",
        )
    raise InvalidRequest(
        f"model '{name}' cannot take {what} input: it was loaded without a projector that does",
        param="messages",
        hint="serve it with its mmproj file (--mmproj FILE), or send text only",
    )
