"""The engine facade: named models in, token streams out. Routes and the TUI see only this.

Models are loaded on first use (or ahead, with ``preload``) and unloaded when idle past their keep-alive or when
another needs the room: ``engine/scheduler.py`` decides. Each request's prompt is built here (chat template, stop
strings) and handed to the model's backend; the request counts as the model's in flight until its stream ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeVar

from localinfer.backends.base import (
    Backend,
    EmbeddingInput,
    EmbeddingResult,
    LoadSpec,
    LoraAdapter,
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
from localinfer.backends.llamacpp.devices import parse_devices
from localinfer.backends.llamacpp.rpc.wire import parse_endpoints
from localinfer.backends.registry import (
    DEFAULT_BACKENDS,
    PLANNED_FORMATS,
    RELAYED_FORMATS,
    BackendFactories,
    BackendFactory,
    backend_for,
    engine_for,
)
from localinfer.config import Settings
from localinfer.engine import slot_folder
from localinfer.engine.device_memory import RAM, MachineMemory, plan_need
from localinfer.engine.infill import infill_tokens
from localinfer.engine.inflight import InFlight
from localinfer.engine.metrics import EngineMetrics
from localinfer.engine.profiles import model_profile, trained_context, with_its_projector
from localinfer.engine.scheduler import Clock, MemoryProbe, Need, Runner, Scheduler
from localinfer.engine.templates import RenderedPrompt, chat_template
from localinfer.engine.thinking_split import chat_reply, honoured
from localinfer.engine.tools import required_call
from localinfer.errors import (
    InvalidRequest,
    LocalInferError,
    ModelLoadError,
    ModelNotFound,
    ModelNotReady,
    ServerShuttingDown,
)
from localinfer.hardware.layer_split import parse_tensor_split
from localinfer.hardware.model_profile import ModelProfile, from_path, with_adapters, with_draft
from localinfer.hardware.plan import Overrides, PlanError, plan
from localinfer.hardware.profile import HardwareProfile
from localinfer.hardware.rpc_devices import RemoteDevice
from localinfer.models.defaults import NO_DEFAULTS, ModelDefaults, with_defaults
from localinfer.models.projector import modalities
from localinfer.models.store import Manifest, ModelSource
from localinfer.types import (
    DEFAULT_KV_CACHE_TYPE,
    OLLAMA_FORMAT_NAMES,
    ChatRequest,
    CompletionRequest,
    GenerationRequest,
    InfillRequest,
    MediaPart,
    ModelInfo,
    Thinking,
    ThinkingBudget,
    TokenStream,
)

log = logging.getLogger(__name__)

Health = Literal["ready", "loading", "error"]
T = TypeVar("T")


@dataclass(frozen=True)
class ServedAs:
    """How one model is served otherwise than its file says: ``chat_template`` (a name of llama.cpp's built-in
    templates, or Jinja text) in place of its own; ``pooling`` (mean, cls, last, rank, none) in place of the stated
    one."""

    chat_template: str | None = None
    pooling: str = ""
    lora: tuple[LoraAdapter, ...] = ()  # LoRA adapters loaded with it (--lora, --lora-scaled), in id order
    mmproj: Path | None = None  # its projector, in place of the one paired with it (--mmproj)


NOT_OVERRIDDEN: Final = ServedAs()


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
        self._rpc_devices = rpc_devices
        self._served_as = dict(served_as or {})
        self._models = models
        self._backend_factory = backend_factory
        self._hardware = hardware
        self._scheduler = Scheduler(
            self._new_runner,
            self._load,
            self._unload,
            estimate=self._estimate,
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

    def _load_spec(self, manifest: Manifest, ctx_size: int | None, *, explain: bool = True) -> LoadSpec:
        s = self._settings
        spec = LoadSpec(
            path=manifest.path,
            name=manifest.name,
            ctx_size=self._context(manifest, ctx_size),
            threads=s.threads,
            batch_size=s.batch_size,
            ubatch_size=s.ubatch_size,
            parallel=s.parallel,
            max_queue=s.max_queue,
            gpu_layers=s.gpu_layers or 0,
            extra_args=tuple(s.engine_args),
            flash_attn=s.flash_attn,
            cache_reuse=s.cache_reuse,
            context_shift=s.context_shift,
            last_token_alone=s.last_token_alone,
            devices=parse_devices(s.device),
            kv_offload=s.kv_offload,
            op_offload=s.op_offload,
            rpc=parse_endpoints(s.rpc),
            tensor_split=parse_tensor_split(s.tensor_split),
            speculation=s.speculation,
            draft_path=self._draft_path(),
            draft_max=s.draft_max,
            draft_min=s.draft_min,
            pooling=self._served(manifest.name).pooling,
            lora=self._lora(manifest),
            mmproj=self._projector_path(manifest),
            mmproj_offload=s.mmproj_offload,
            image_min_tokens=s.image_min_tokens,
            image_max_tokens=s.image_max_tokens,
        )
        if self._asks_kv_cache_types():
            spec = dataclasses.replace(
                spec,
                cache_type_k=s.cache_type_k or DEFAULT_KV_CACHE_TYPE,
                cache_type_v=s.cache_type_v or DEFAULT_KV_CACHE_TYPE,
            )
        if self._hardware is None or manifest.format not in PLANNED_FORMATS:
            return spec
        try:
            chosen = plan(self._hardware, self._profile(manifest), self._overrides(manifest, spec.ctx_size or None))
        except PlanError as exc:
            if manifest.format in RELAYED_FORMATS:  # its engine cannot run here: starting it would only fail later
                raise ModelLoadError(exc.message, hint=exc.hint) from exc
            log.warning("no plan for %s (%s): loading it as configured", manifest.name, exc.message)
            return spec
        except LocalInferError as exc:
            log.warning("no plan for %s (%s): loading it as configured", manifest.name, exc.message)
            return spec
        if explain:
            log.info("plan for %s: %s", manifest.name, "; ".join(chosen.reasons))
        if explain and not chosen.fits:
            log.warning("%s may not fit in memory: %s", manifest.name, chosen.reasons)
        return dataclasses.replace(
            spec,
            ctx_size=chosen.ctx_size,
            threads=chosen.threads,
            parallel=chosen.parallel,
            gpu_layers=chosen.gpu_layers,
            provider=chosen.provider,
            extra_args=spec.extra_args + chosen.engine_args,
            tensor_parallel=chosen.tensor_parallel,
            cache_type_k=chosen.cache_type_k,
            cache_type_v=chosen.cache_type_v,
        )

    def _context(self, manifest: Manifest, ctx_size: int | None) -> int:
        """The context ``manifest`` loads with: ``ctx_size`` when asked, else its Modelfile's ``num_ctx``, else the
        configured one (Ollama's order)."""
        if ctx_size is not None:
            return ctx_size
        num_ctx = manifest.defaults.parameter("num_ctx")
        return num_ctx if isinstance(num_ctx, int) and num_ctx > 0 else self._settings.ctx_size

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

    def _projector_path(self, manifest: Manifest) -> Path | None:
        """The projector to load with ``manifest``'s model: --mmproj's for the served model, else the one paired
        with it in the store; none with --no-mmproj."""
        if self._settings.no_mmproj:
            return None
        given = self._served(manifest.name).mmproj
        return given or (manifest.projector.path if manifest.projector is not None else None)

    def _served(self, name: str) -> ServedAs:
        return self._served_as.get(name, NOT_OVERRIDDEN)

    def _draft_path(self) -> Path | None:
        """The draft model's file when GGUF models speculate with one: the draft setting as a path, else the model
        of that name."""
        draft = self._settings.draft
        if self._settings.speculation != "draft" or not draft:
            return None
        return Path(draft) if Path(draft).is_file() else self._models.resolve(draft).path

    def _overrides(self, manifest: Manifest, ctx_size: int | None) -> Overrides:
        """What the settings ask of the planner for ``manifest``, with a context of ``ctx_size`` (None: planned);
        a Hugging Face folder is planned on the engine that will serve it (a built TensorRT-LLM engine's files
        choose TensorRT-LLM when the engine setting names none), as the registry chooses it."""
        s = self._settings
        return Overrides(
            gpu_layers=0 if parse_devices(s.device) == () else s.gpu_layers,
            ctx_size=ctx_size,
            parallel=s.parallel or None,
            threads=s.threads or None,
            cache_type_k=s.cache_type_k,
            cache_type_v=s.cache_type_v,
            flash_attn=s.flash_attn,
            rpc_workers=len(parse_endpoints(s.rpc)),
            rpc_devices=self._rpc_devices,
            engine=engine_for(manifest, s.engine) if manifest.format in RELAYED_FORMATS else s.engine,
            engine_asked=s.engine is not None,
            projector_offload=s.mmproj_offload,
        )

    def _estimate(self, manifest: Manifest, ctx_size: int | None) -> Need:
        """What ``manifest`` loaded with a context of ``ctx_size`` takes, per device: the planner's estimate, or
        its file's size where there is no plan; with the draft model beside it when one drafts for it (its
        weights and KV cache in the plan, its file's size without one)."""
        if self._hardware is not None and manifest.format in PLANNED_FORMATS:
            overrides = self._overrides(manifest, self._context(manifest, ctx_size) or None)
            with suppress(LocalInferError):  # no plan: the files' size
                return plan_need(plan(self._hardware, self._profile(manifest), overrides))
        draft_bytes = 0
        with suppress(LocalInferError, OSError):  # serve checked the draft at start: this one was removed since
            draft = self._draft_for(manifest)
            draft_bytes = draft.stat().st_size if draft is not None else 0
        return {RAM: manifest.size + draft_bytes + self._adapter_bytes(manifest)}

    def _profile(self, manifest: Manifest) -> ModelProfile:
        """What the planner reads of ``manifest``, with its draft model beside it when one drafts for it (the model
        alone, with a warning, when the draft cannot be read: serve checked it at start, so it was removed since,
        and the load will say so)."""
        profile = with_its_projector(model_profile(manifest), self._projector_path(manifest))
        profile = with_adapters(profile, self._adapter_bytes(manifest))
        try:
            draft = self._draft_for(manifest)
            return with_draft(profile, from_path(draft)) if draft is not None else profile
        except LocalInferError as exc:
            log.warning("planning %s without its draft model: %s", manifest.name, exc.message)
            return profile

    def _lora(self, manifest: Manifest) -> tuple[LoraAdapter, ...]:
        """The LoRA adapters ``manifest``'s model is loaded with: its own (a Modelfile's ADAPTER, an Ollama adapter
        layer: at scale 1, as Ollama applies them), then those ``--lora`` gives the model served."""
        if manifest.format != "gguf":
            return ()
        return (*(LoraAdapter(f.path, 1.0) for f in manifest.adapters), *self._served(manifest.name).lora)

    def _adapter_bytes(self, manifest: Manifest) -> int:
        """What the LoRA adapters loaded with ``manifest`` take: their files' size (a missing one: the load says)."""
        total = 0
        for adapter in self._lora(manifest):
            with suppress(OSError):
                total += adapter.path.stat().st_size
        return total

    def _draft_for(self, manifest: Manifest) -> Path | None:
        """The draft model's file when ``manifest`` speculates with one (GGUF models, served by llama.cpp)."""
        return self._draft_path() if manifest.format == "gguf" else None

    def check_plan(self, manifest: Manifest) -> None:
        """Plan ``manifest``'s load now, and let its backend check what it can without loading, so that a model
        this machine cannot run (vLLM's without its GPU) or a draft model of another vocabulary fails before it is
        served; the plan is logged when the model loads. Raises ModelLoadError."""
        spec = self._load_spec(manifest, None, explain=False)
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

    def _asks_kv_cache_types(self) -> bool:
        return (self._settings.cache_type_k, self._settings.cache_type_v) != (None, None)

    async def _load(self, runner: Runner) -> None:
        manifest = runner.manifest
        if self._asks_kv_cache_types() and not runner.backend.capabilities.kv_cache_types:
            kind = OLLAMA_FORMAT_NAMES.get(manifest.format, manifest.format)
            raise ModelLoadError(
                f"{manifest.name} ({kind}) is served by {runner.backend.name}, which keeps its KV cache in a type "
                "of its own: --cache-type-k/--cache-type-v apply to GGUF models, served by llama.cpp",
                hint="vLLM takes its own: --engine-arg=--kv-cache-dtype=fp8"
                if manifest.format in RELAYED_FORMATS
                else "start the server without them to serve this model",
            )
        await runner.backend.load(self._load_spec(manifest, runner.ctx_size))
        self.metrics.track(manifest.name, runner.backend.decode_stats())
        override = self._served(manifest.name).chat_template or manifest.defaults.template
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
        projector = self._projector_path(manifest)
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
            request.model, lambda runner: _rendered(runner, request), keep_alive=request.keep_alive
        )

    async def _chat(self, runner: Runner, request: ChatRequest, started: float) -> TokenStream:
        rendered = await _rendered(runner, request)
        tools = request.tools if request.tool_choice != "none" else ()
        options = dataclasses.replace(request.options, stop=request.options.stop + rendered.stop)
        if tools and request.tool_choice != "auto":
            options = dataclasses.replace(options, response_format=required_call(options, tools, request.tool_choice))
        markers = runner.backend.facts.thinking
        thinking = honoured(thinking_asked(request), markers)
        if markers is not None and thinking.enabled is not False and options.response_format.type.startswith("json"):
            held = dataclasses.replace(  # the JSON is the answer: the thinking before it stays free
                options.response_format, after_thinking=markers, thinking_open=rendered.thinking_open
            )
            options = dataclasses.replace(options, response_format=held)
        if markers is not None and thinking.budget is not None and thinking.enabled is not False:
            budget = ThinkingBudget(thinking.budget, markers, inside=rendered.thinking_open)
            options = dataclasses.replace(options, thinking_budget=budget)
        generation = GenerationRequest(
            request_id=_new_id(),
            prompt=rendered.text,
            options=options,
            add_special=rendered.add_special,
            priority=request.priority,
            media=tuple(part for message in request.messages for part in message.media),
        )
        reply = chat_reply(
            self._generate(runner, generation, started),
            markers,
            thinking_open=rendered.thinking_open,
            separate=thinking.separate,
            prompt=rendered.text,
            tools=tools,
        )
        async with aclosing(reply) as chunks:
            async for chunk in chunks:
                yield chunk

    def complete(self, request: CompletionRequest) -> TokenStream:
        return self._on_model(request, lambda runner, started: self._complete(runner, request, started))

    async def _complete(self, runner: Runner, request: CompletionRequest, started: float) -> TokenStream:
        if request.tokens and not runner.backend.capabilities.token_prompts:
            raise InvalidRequest(
                f"a prompt of token ids is not supported by the {runner.backend.name} backend", param="prompt"
            )
        generation = GenerationRequest(
            request_id=_new_id(),
            prompt=request.prompt,
            options=request.options,
            tokens=request.tokens,
            priority=request.priority,
            media=request.media,
        )
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
        tokens = await infill_tokens(_able(runner, "tokenize", "fill-in-the-middle"), request)
        generation = GenerationRequest(
            request_id=_new_id(), prompt="", options=request.options, tokens=tuple(tokens), priority=request.priority
        )
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


async def _rendered(runner: Runner, request: ChatRequest) -> RenderedPrompt:
    """``request``'s turns and tools (none when ``tool_choice`` is none) through ``runner``'s chat template."""
    if runner.template is None:
        raise ModelNotReady(f"model '{request.model}' is still loading")
    tools = request.tools if request.tool_choice != "none" else ()
    messages = with_defaults(request.messages, runner.manifest.defaults)
    return runner.template.render(
        messages, tools, thinking_asked(request), request.template_kwargs, ending=request.ending
    )


def thinking_asked(request: ChatRequest) -> Thinking:
    """What ``request`` asks of the thinking: its own, switched by ``enable_thinking`` among its template's
    variables (``chat_template_kwargs``, as llama-server and vLLM take it) when it says nothing itself."""
    enabled = request.template_kwargs.get("enable_thinking")
    if request.thinking.enabled is None and isinstance(enabled, bool):
        return dataclasses.replace(request.thinking, enabled=enabled)
    return request.thinking


def _able(runner: Runner, capability: str, what: str) -> Backend:
    """``runner``'s backend when its capabilities declare ``capability``. Raises InvalidRequest naming ``what``
    it cannot do."""
    backend = runner.backend
    if not getattr(backend.capabilities, capability):
        raise InvalidRequest(f"{what} is not supported by the {backend.name} backend of '{runner.name}'", param="model")
    return backend


def _new_id() -> str:
    return uuid.uuid4().hex


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
