"""An engine's OpenAI server as a child process (``launcher``), spoken to through ``proxy``; which engine and how
it is started is its ``Recipe`` (``recipes/``).

No engine is imported here: it runs in its own process, started with this interpreter (vLLM, SGLang) or from PATH
(TGI, ``trtllm-serve``). The server's routes relay clients' requests straight to ``proxy``; ``generate`` serves
localinfer's own paths (Ollama, Anthropic...) through a streamed ``/v1/completions`` call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from localinfer.backends.base import Backend, Capabilities, LoadSpec, ModelFacts, SlotUsage
from localinfer.backends.engine_process.completions import completion_body, error_for, sse_data, token_chunks
from localinfer.backends.engine_process.facts import flag_value, model_facts, renamed_flag
from localinfer.backends.engine_process.launcher import EngineProcess
from localinfer.backends.engine_process.proxy import EngineProxy
from localinfer.backends.engine_process.recipe import Recipe
from localinfer.errors import ModelLoadError, ModelNotReady
from localinfer.models.store import HF_CONFIG
from localinfer.types import GenerationRequest, TokenStream

log = logging.getLogger(__name__)

READY_TIMEOUT = 1200.0  # seconds: a large model, read from disk and compiled, can take many minutes
JSON_HEADERS = [("content-type", "application/json")]
TENSOR_PARALLEL = "--tensor-parallel-size"  # as serve's flag, and the engine_args setting, write it


class EngineProcessBackend(Backend):
    """One model served by an engine's child process, started as ``recipe`` says (a subclass names its engine;
    a test passes a stand-in's recipe)."""

    name: ClassVar[str] = "engine"
    default_recipe: ClassVar[Recipe | None] = None
    capabilities: ClassVar[Capabilities] = Capabilities(formats=("safetensors",), grammar=True, batching=True)

    def __init__(
        self,
        *,
        recipe: Recipe | None = None,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = READY_TIMEOUT,
        stop_grace: float = 10.0,
    ) -> None:
        chosen = recipe or self.default_recipe
        if chosen is None:
            raise TypeError("an engine process backend needs a recipe")
        self.recipe = chosen
        self._log_dir = log_dir
        self._env = env
        self._ready_timeout = ready_timeout
        self._stop_grace = stop_grace
        self._process: EngineProcess | None = None
        self._proxy: EngineProxy | None = None
        self._facts: ModelFacts | None = None
        self._model_id = ""

    @property
    def process(self) -> EngineProcess | None:
        """The engine's process while loaded."""
        return self._process

    @property
    def relay(self) -> EngineProxy | None:
        """The proxy to the engine's server while loaded."""
        return self._proxy

    async def load(self, spec: LoadSpec) -> None:
        """Start the engine for ``spec.path`` and wait until it serves. Raises ModelLoadError (with what the
        engine's log says went wrong) when it exits or is not ready in time; the child is stopped then."""
        if self._process is not None:
            raise ModelLoadError("this backend already has a model loaded", hint="unload it first")
        recipe = self.recipe
        folder = spec.path.parent if spec.path.name == HF_CONFIG else spec.path  # a manifest's path is its config
        flags = recipe.flags
        # serve's --tensor-parallel-size arrives in vLLM's spelling: each engine gets its own flag for it
        extra = [*recipe.model_args(folder), *renamed_flag(spec.extra_args, TENSOR_PARALLEL, flags.tensor_parallel)]
        if spec.ctx_size > 0 and flags.max_model_len and flag_value(extra, flags.max_model_len) is None:
            extra += [flags.max_model_len, str(spec.ctx_size)]
        if spec.tensor_parallel > 1 and flags.tensor_parallel and flag_value(extra, flags.tensor_parallel) is None:
            extra += [flags.tensor_parallel, str(spec.tensor_parallel)]
        launch = recipe.launch(str(folder), served_name=spec.name, extra=extra)
        process = EngineProcess(launch, log_path=self._new_log(), env=self._env)
        process.start()
        if not recipe.checks_key:
            log.warning("%s", recipe.no_key_note)
        proxy = EngineProxy(process.url, process.api_key, alive=lambda: process.alive)
        try:
            try:
                await process.wait_ready(self._ready_timeout)
            except ModelLoadError as exc:
                why = recipe.why_failed(process.log_tail(200))
                if why is None:
                    raise
                raise ModelLoadError(f"{recipe.title} failed to start: {why}\n{exc.message}", hint=exc.hint) from exc
            card = await _model_card(proxy)
        except BaseException:
            await process.stop(grace=self._stop_grace)
            await proxy.aclose()
            raise
        self._process, self._proxy, self._model_id = process, proxy, str(card["id"])
        self._facts = model_facts(folder, card, recipe, ctx_size=spec.ctx_size, extra_args=extra)

    @property
    def facts(self) -> ModelFacts:
        if self._facts is None:
            raise ModelNotReady("the model is not loaded yet")
        return self._facts

    async def generate(self, request: GenerationRequest) -> TokenStream:
        """Stream ``request`` from the engine. Raises InvalidRequest for an option the engine would drop and for
        what it refuses with a 400 or 422, and GenerationFailed when it fails or its process exits."""
        if self._proxy is None:
            raise ModelNotReady("the model is not loaded yet", hint="retry when GET /health answers 200")
        self.recipe.refuse_unhonoured(request.options)
        body = json.dumps(completion_body(self._model_id, request, top_k_off=self.recipe.top_k_off)).encode()
        answer = await self._proxy.forward("POST", "/v1/completions", JSON_HEADERS, body)
        try:
            if answer.status != 200:
                raise error_for(answer.status, await answer.read(), self.recipe.title)
            async for chunk in token_chunks(sse_data(answer.body), self.recipe.title):
                yield chunk
        finally:
            await answer.aclose()  # closes the engine's connection, which aborts the request there

    async def unload(self) -> None:
        """Stop the engine's whole process group (requests in flight end with GenerationFailed) and close the
        proxy."""
        process, proxy = self._process, self._proxy
        self._process, self._proxy, self._facts = None, None, None
        if process is not None:
            await process.stop(grace=self._stop_grace)
        if proxy is not None:
            await proxy.aclose()

    def slot_usage(self) -> SlotUsage:
        return SlotUsage()  # the engine schedules its own batch; its queue is not visible from here

    def _new_log(self) -> Path:
        log_dir = self._log_dir or Path(tempfile.gettempdir()) / "localinfer"
        log_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f"{self.recipe.name}-", suffix=".log", dir=log_dir)
        os.close(fd)
        return Path(name)


async def _model_card(proxy: EngineProxy) -> dict[str, Any]:
    answer = await proxy.forward("GET", "/v1/models", [], b"")
    body = await answer.read()
    with contextlib.suppress(ValueError, LookupError, TypeError):  # not the card: said below
        card = json.loads(body)["data"][0]
        if answer.status == 200 and isinstance(card, dict) and "id" in card:
            return card
    raise ModelLoadError(f"the engine's /v1/models answered {answer.status}: {body[:300]!r}")
