"""The engine facade: named models in, token streams out. Routes and the TUI see only this.

Models are loaded on first use (or ahead, with ``preload``) and kept while the engine runs. Each request's
prompt is built here (chat template, stop strings) and handed to the model's backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from localinfer.backends.base import Backend, LoadSpec, SlotUsage
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.config import Settings
from localinfer.engine.templates import ChatTemplate
from localinfer.errors import LocalInferError, ModelNotReady
from localinfer.models.store import Manifest, ModelSource
from localinfer.types import ChatRequest, CompletionRequest, GenerationRequest, ModelInfo, TokenStream

log = logging.getLogger(__name__)

BackendFactory = Callable[[], Backend]
Health = Literal["ready", "loading", "error"]


@dataclass
class Runner:
    """A model being loaded or loaded: its manifest, backend, and (once loaded) its chat template."""

    manifest: Manifest
    backend: Backend
    ready: asyncio.Future[None]
    template: ChatTemplate | None = None


class Engine:
    def __init__(self, settings: Settings, models: ModelSource, backend_factory: BackendFactory = LlamaCppBackend):
        self._settings = settings
        self._models = models
        self._backend_factory = backend_factory
        self._runners: dict[str, Runner] = {}
        self._loading: set[asyncio.Task[None]] = set()

    def _load_spec(self, manifest: Manifest) -> LoadSpec:
        s = self._settings
        return LoadSpec(
            path=manifest.path,
            ctx_size=s.ctx_size,
            threads=s.threads,
            batch_size=s.batch_size,
            parallel=s.parallel,
            max_queue=s.max_queue,
            gpu_layers=s.gpu_layers,
        )

    def preload(self, manifest: Manifest) -> Runner:
        """Start loading ``manifest`` in the background (``health`` says ``loading`` until it is done)."""
        existing = self._runners.get(manifest.name)
        if existing is not None:
            return existing
        runner = Runner(manifest, self._backend_factory(), asyncio.get_running_loop().create_future())
        self._runners[manifest.name] = runner
        task = asyncio.create_task(self._load(runner), name=f"load {manifest.name}")
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)
        return runner

    async def _load(self, runner: Runner) -> None:
        try:
            await runner.backend.load(self._load_spec(runner.manifest))
            runner.template = ChatTemplate(runner.backend.facts)
            facts = runner.backend.facts
            log.info(
                "model %s ready: %s, %d slots of %d tokens, chat template: %s",
                runner.manifest.name,
                facts.architecture,
                facts.n_slots,
                facts.n_ctx,
                runner.template.kind,
            )
            runner.ready.set_result(None)
        except asyncio.CancelledError:
            self._runners.pop(runner.manifest.name, None)
            runner.ready.cancel()
            raise
        except Exception as exc:
            log.error("loading %s failed: %s", runner.manifest.name, exc)
            self._runners.pop(runner.manifest.name, None)
            runner.ready.set_exception(exc)
            runner.ready.exception()  # marked retrieved: nobody may be waiting

    async def runner(self, model: str) -> Runner:
        """The loaded runner for ``model``, loading it on first use. Raises ModelNotFound, ModelLoadError."""
        runner = self._runners.get(model)
        if runner is None:
            runner = self.preload(self._models.resolve(model))
        await asyncio.shield(runner.ready)
        return runner

    def health(self) -> Health:
        if any(not r.ready.done() for r in self._runners.values()):
            return "loading"
        return "ready" if self._runners else "error"

    def slot_usage(self) -> SlotUsage:
        return sum((r.backend.slot_usage() for r in self._runners.values() if r.ready.done()), SlotUsage())

    def models(self) -> list[ModelInfo]:
        """Every model the engine can serve, with whether each is loaded: loaded ones first, then by name."""
        infos = {m.name: m for m in self._models.list()}
        infos.update({name: r.manifest for name, r in self._runners.items()})
        models = [
            ModelInfo(
                name=m.name,
                path=str(m.path),
                size_bytes=m.size,
                quantization=m.quantization,
                source=m.source,
                loaded=m.name in self._runners and self._runners[m.name].ready.done(),
                created=m.created,
            )
            for m in infos.values()
        ]
        return sorted(models, key=lambda m: (not m.loaded, m.name))

    async def chat(self, request: ChatRequest) -> TokenStream:
        runner = await self.runner(request.model)
        if runner.template is None:
            raise ModelNotReady(f"model '{request.model}' is still loading")
        rendered = runner.template.render(request.messages)
        options = dataclasses.replace(request.options, stop=request.options.stop + rendered.stop)
        generation = GenerationRequest(
            request_id=_new_id(), prompt=rendered.text, options=options, add_special=rendered.add_special
        )
        async for chunk in runner.backend.generate(generation):
            yield chunk

    async def complete(self, request: CompletionRequest) -> TokenStream:
        runner = await self.runner(request.model)
        generation = GenerationRequest(request_id=_new_id(), prompt=request.prompt, options=request.options)
        async for chunk in runner.backend.generate(generation):
            yield chunk

    async def close(self) -> None:
        """Unload every model; requests in flight end with an error."""
        runners, self._runners = list(self._runners.values()), {}
        for runner in runners:
            try:
                if runner.ready.done() and runner.ready.exception() is None:
                    await runner.backend.unload()
            except (LocalInferError, asyncio.CancelledError):
                log.warning("unloading %s failed", runner.manifest.name)


def _new_id() -> str:
    return uuid.uuid4().hex
