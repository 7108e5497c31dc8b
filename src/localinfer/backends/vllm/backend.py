"""The vLLM backend: ``vllm serve`` as a child process (``launcher``), spoken to through ``proxy``.

vLLM is never imported here: it runs in its own process, started with this interpreter, so the extra
``localinfer[vllm]`` only has to be installed in the same environment. The server's routes can relay clients'
requests straight to ``proxy``; ``generate`` serves the engine's own paths (chat templates rendered by the
engine) through a streamed ``/v1/completions`` call.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from localinfer.backends.base import Backend, Capabilities, LoadSpec, ModelFacts, SlotUsage
from localinfer.backends.vllm.completions import completion_body, error_for, sse_data, token_chunks
from localinfer.backends.vllm.facts import flag_value, model_facts
from localinfer.backends.vllm.launcher import EngineProcess, vllm_command
from localinfer.backends.vllm.proxy import EngineProxy
from localinfer.errors import ModelLoadError, ModelNotReady
from localinfer.models.store import HF_CONFIG
from localinfer.types import GenerationRequest, TokenStream

READY_TIMEOUT = 1200.0  # seconds: a large model, read from disk and compiled, can take many minutes
JSON_HEADERS = [("content-type", "application/json")]


class VllmBackend(Backend):
    """One model served by a ``vllm serve`` child. ``command(model)`` builds the command line without the host,
    port, key and extra arguments the launcher adds; a test passes a stand-in server's."""

    name: ClassVar[str] = "vllm"
    capabilities: ClassVar[Capabilities] = Capabilities(formats=("safetensors",), grammar=True, batching=True)

    def __init__(
        self,
        *,
        command: Callable[[str], Sequence[str]] = vllm_command,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = READY_TIMEOUT,
        stop_grace: float = 10.0,
        key_env: str = "VLLM_API_KEY",
    ) -> None:
        self._command = command
        self._key_env = key_env
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
        """Start the engine for ``spec.path`` and wait until it serves. Raises ModelLoadError (with the end of the
        engine's log) when it exits or is not ready in time; the child is stopped then."""
        if self._process is not None:
            raise ModelLoadError("this backend already has a model loaded", hint="unload it first")
        folder = spec.path.parent if spec.path.name == HF_CONFIG else spec.path  # a manifest's path is its config
        extra = list(spec.extra_args)
        if spec.ctx_size > 0 and flag_value(extra, "--max-model-len") is None:
            extra += ["--max-model-len", str(spec.ctx_size)]
        if spec.name and flag_value(extra, "--served-model-name") is None:
            extra += ["--served-model-name", spec.name]  # clients' requests name it so, and are relayed as they are
        process = EngineProcess(
            self._command(str(folder)),
            log_path=self._new_log(),
            extra_args=extra,
            env=self._env,
            key_env=self._key_env,
        )
        process.start()
        proxy = EngineProxy(process.url, process.api_key, alive=lambda: process.alive)
        try:
            await process.wait_ready(self._ready_timeout)
            card = await _model_card(proxy)
        except BaseException:
            await process.stop(grace=self._stop_grace)
            await proxy.aclose()
            raise
        self._process, self._proxy, self._model_id = process, proxy, str(card["id"])
        self._facts = model_facts(folder, card, ctx_size=spec.ctx_size, extra_args=extra)

    @property
    def facts(self) -> ModelFacts:
        if self._facts is None:
            raise ModelNotReady("the model is not loaded yet")
        return self._facts

    async def generate(self, request: GenerationRequest) -> TokenStream:
        """Stream ``request`` from the engine. Raises InvalidRequest for what vLLM refuses with a 400, and
        GenerationFailed when the engine fails or its process exits."""
        if self._proxy is None:
            raise ModelNotReady("the model is not loaded yet", hint="retry when GET /health answers 200")
        body = json.dumps(completion_body(self._model_id, request)).encode()
        answer = await self._proxy.forward("POST", "/v1/completions", JSON_HEADERS, body)
        try:
            if answer.status != 200:
                raise error_for(answer.status, await answer.read())
            async for chunk in token_chunks(sse_data(answer.body)):
                yield chunk
        finally:
            await answer.aclose()  # closes the engine's connection, which aborts the request there

    async def unload(self) -> None:
        """Stop the engine (requests in flight end with GenerationFailed) and close the proxy."""
        process, proxy = self._process, self._proxy
        self._process, self._proxy, self._facts = None, None, None
        if process is not None:
            await process.stop(grace=self._stop_grace)
        if proxy is not None:
            await proxy.aclose()

    def slot_usage(self) -> SlotUsage:
        return SlotUsage()  # vLLM schedules its own batch; its queue is not visible from here

    def _new_log(self) -> Path:
        log_dir = self._log_dir or Path(tempfile.gettempdir()) / "localinfer"
        log_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="vllm-", suffix=".log", dir=log_dir)
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
