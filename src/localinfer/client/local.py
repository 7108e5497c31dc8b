"""``LocalClient``: the engine in this process. Pulls run in a thread; everything else on the event loop."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import AsyncGenerator, Callable

import psutil

from localinfer.client.base import ClientStatus, LoadedModelStatus
from localinfer.client.chat_body import chosen_fields
from localinfer.config import Settings
from localinfer.engine.device_memory import RAM
from localinfer.engine.engine import Engine
from localinfer.errors import ServerShuttingDown
from localinfer.models.create import CreateSpec, copy, create
from localinfer.models.defaults import with_parameters
from localinfer.models.hub import HubClient
from localinfer.models.library import ModelLibrary
from localinfer.models.pull import pull
from localinfer.models.store import Manifest, ModelStore
from localinfer.progress import ProgressEvent, ProgressSink
from localinfer.types import ChatRequest, ModelInfo, TokenChunk

_DONE = object()


class PullStopped(Exception):
    """Raised inside the pull thread when the consumer stopped listening; the partial download is kept."""


class LocalClient:
    def __init__(
        self,
        engine: Engine,
        library: ModelLibrary,
        settings: Settings,
        *,
        serving: str | None = None,
        hub: HubClient | None = None,
    ) -> None:
        """``hub`` is where pulls go (default: the Hub the environment names, as ``localinfer pull``)."""
        self._engine = engine
        self._library = library
        self._settings = settings
        self._hub = hub
        self._pulls: dict[threading.Event, asyncio.Queue[object]] = {}  # in flight: its stop, its events
        self.serving = serving  # set by whoever starts the API server beside the app

    @property
    def store(self) -> ModelStore:
        return self._library.store

    @property
    def where(self) -> str:
        return "in-process"

    def chat(self, request: ChatRequest) -> AsyncGenerator[TokenChunk, None]:
        """``request`` answered, the model's own parameters (its Modelfile's) filling what its caller did not choose
        (chat_body.chosen_fields), as the server's dialects and HttpClient's server fill them."""
        defaults = self._engine.model_defaults(request.model)
        options = with_parameters(request.options, defaults, chosen_fields(request))
        return self._engine.chat(dataclasses.replace(request, options=options))

    async def models(self) -> list[ModelInfo]:
        return self._engine.models()

    async def load(self, model: str, *, context_length: int | None = None) -> None:
        """Load ``model``; the others stay loaded while they fit (the scheduler makes room when they do not)."""
        await self._engine.load(model, ctx_size=context_length)

    def pull(self, ref: str, *, local_files: bool = True) -> AsyncGenerator[ProgressEvent, None]:
        """As ``localinfer pull REF``, in a thread; its progress events come back on the event loop.

        ``local_files=False`` (a pull asked for over HTTP) takes Hub, catalog and PyPI references only."""
        store = self._library.store
        return self._in_thread(
            lambda sink: pull(store, ref, self._settings, progress=sink, hub=self._hub, local_files=local_files)
        )

    def create(self, name: str, spec: CreateSpec) -> AsyncGenerator[ProgressEvent, None]:
        """As ``localinfer create NAME``, in a thread (a base model may be pulled, its weights quantized); its
        progress events come back on the event loop, the last one ``success``."""
        from localinfer.quantize.for_create import adapter_converter, quantizer  # gguf, numpy: when a model is made

        library = self._library
        quantize = quantizer(library.store, library)
        return self._in_thread(
            lambda sink: create(
                library,
                name,
                spec,
                self._settings,
                progress=sink,
                quantizer=quantize,
                adapter_converter=adapter_converter(library.store),
            )
        )

    async def copy(self, source: str, destination: str) -> None:
        """As ``localinfer cp SOURCE DESTINATION``."""
        copy(self._library, source, destination)

    async def _in_thread(self, work: Callable[[ProgressSink], object]) -> AsyncGenerator[ProgressEvent, None]:
        """``work(sink)`` in a thread; the events it sends ``sink`` come back here. The consumer stopping stops it
        at its next event (a partial download is kept); what it raises is raised here."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[object] = asyncio.Queue()
        stop = threading.Event()

        def sink(event: ProgressEvent) -> None:
            if stop.is_set():
                raise PullStopped
            loop.call_soon_threadsafe(events.put_nowait, event)

        def run() -> None:
            try:
                work(sink)
                loop.call_soon_threadsafe(events.put_nowait, _DONE)
            except BaseException as exc:  # handed to the consumer, raised there
                loop.call_soon_threadsafe(events.put_nowait, exc)

        worker = loop.run_in_executor(None, run)
        self._pulls[stop] = events
        try:
            while True:
                item = await events.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, ProgressEvent)
                yield item
        finally:
            stop.set()
            self._pulls.pop(stop, None)
            if not worker.done():
                await asyncio.shield(worker)  # the thread stops at its next progress event

    async def remove(self, model: str) -> int:
        """Unload ``model`` (and any model served from its file) and then remove it; the bytes freed.

        A removal that is refused (ModelNotFound, ModelManagedElsewhere) changes nothing: nothing is unloaded.
        """
        manifest = self._library.removable(model)
        await self._unload_users(model, manifest)
        freed = self._library.remove(model)
        await self._unload_users(model, manifest)  # a request that came while it unloaded may have loaded it again
        return freed

    async def _unload_users(self, model: str, manifest: Manifest) -> None:
        """Unload ``model`` and every model loaded (or loading) from ``manifest``'s file."""
        for info in self._engine.models():
            if (info.loaded or info.loading) and (info.name == model or info.path == str(manifest.path)):
                await self._engine.unload(info.name)

    async def status(self) -> ClientStatus:
        loaded = tuple(
            LoadedModelStatus(
                name=m.name,
                backend=m.backend,
                context_length=m.facts.n_ctx,
                slots=m.facts.n_slots,
                threads=m.facts.threads,
                gpu_layers=m.facts.gpu_layers,
                size_bytes=m.facts.model_bytes,
                memory_bytes=sum(m.need.values()),
                vram_bytes=sum(size for device, size in m.need.items() if device != RAM),
                cache_type_k=m.facts.cache_type_k,
                cache_type_v=m.facts.cache_type_v,
                devices=m.facts.devices,
                adapters=m.adapters,
                pinned=m.pinned,
                in_flight=m.in_flight,
                expires_in=m.expires_in,
            )
            for m in self._engine.loaded()
        )
        memory = psutil.virtual_memory()
        return ClientStatus(
            where=self.where,
            loaded=loaded,
            memory_used=psutil.Process(os.getpid()).memory_info().rss,
            memory_total=memory.total,
            memory_available=memory.available,
            serving=self.serving,
        )

    async def close(self) -> None:
        await self._engine.close()

    async def shutdown(self) -> None:
        """End everything in flight with ServerShuttingDown: each pull (its thread stops at its next progress
        event, keeping the partial download for a resume and writing no manifest) and, through the engine's
        ``shutdown``, each generation; then unload every model."""
        for stop, events in list(self._pulls.items()):
            stop.set()
            events.put_nowait(ServerShuttingDown())
        await self._engine.shutdown()
