"""A GGUF model placed on llama.cpp RPC workers, served by a child ``localinfer serve`` that this backend starts and
streams from, so that a lost worker ends a request and never the main server.

llama.cpp's RPC client ends the whole process when a worker stops answering (ggml-rpc.cpp's ``RPC_STATUS_ASSERT``
calls ``GGML_ABORT``, which no callback can stop), so the model runs in a child (the launcher of
``backends/engine_process``, recipe ``LOCALINFER``): the same llama.cpp backend, with the load this process planned
passed in its environment, on 127.0.0.1 with a generated key, in a process group of its own. Prompts are rendered
and tokenized here (the vocabulary is read without the weights) and sent as token ids to the child's llama.cpp
``/completion``, so the child computes exactly what this process would.

The child is given the model's file (served under the model's name with ``--alias``) and no settings but those
``child_env`` sets: no config file, none of this process's other ``LOCALINFER_*`` variables.

When the child dies in a request (its stream breaks off, or its process exits), or no piece comes for the
``rpc_stall_timeout`` setting's seconds (5) and ``WorkerWatch`` finds a worker gone (a half-open connection, where
the child would wait for ever; the child is then stopped), the request ends with RpcWorkerLost naming it. A worker
that is only busy (it serves the child) is never taken for gone (``watch.py``). Later requests get
RpcWorkerLost (503) while it is gone, and restart the child once every worker answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from localinfer.backends.base import (
    Backend,
    Capabilities,
    LoadSpec,
    ModelFacts,
    SlotUsage,
    TokenPiece,
    WorkerHealth,
)
from localinfer.backends.engine_process.completions import error_for, sse_data
from localinfer.backends.engine_process.launcher import EngineProcess
from localinfer.backends.engine_process.proxy import EngineProxy
from localinfer.backends.engine_process.recipes.localinfer import LOCALINFER
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.rpc.child_wire import (
    ChildStreamBroken,
    chunks_from,
    completion_body,
    device_use,
    refuse_uncarried,
)
from localinfer.backends.llamacpp.rpc.watch import WorkerWatch
from localinfer.backends.llamacpp.rpc.wire import RpcWorkerError, probe
from localinfer.defaults import RPC_STALL_TIMEOUT
from localinfer.errors import GenerationFailed, ModelLoadError, ModelNotReady, RpcWorkerLost
from localinfer.models.store import is_valid_name
from localinfer.types import GenerationRequest, TokenStream

log = logging.getLogger(__name__)

READY_TIMEOUT = 1200.0  # seconds: a large model's weights cross the network on its first load
EXIT_POLLS, EXIT_POLL_SECONDS = 40, 0.05  # how long an error waits to see whether the child is exiting
JSON_HEADERS = [("content-type", "application/json")]
# what llama.cpp does that the child's /completion is given (child_wire.completion_body): the child has these of
# LlamaCppBackend's capabilities and no others (json schemas, logit bias... are refused: refuse_uncarried)
CARRIED = ("formats", "gbnf", "batching", "token_prompts", "kv_cache_types", "speculative", "tokenize")


def child_env(parent: Mapping[str, str], spec: LoadSpec, home: Path) -> dict[str, str]:
    """The child's environment: ``parent``'s without its localinfer settings, and the settings the load ``spec``
    says (as this process planned it), the model kept for good (this process unloads it by stopping the child) and
    loaded in the child itself; no config file."""
    kept = {key: value for key, value in parent.items() if not key.upper().startswith("LOCALINFER_")}
    env = {
        "CONFIG": os.devnull,
        "HOME": str(home),
        "CTX_SIZE": spec.ctx_size,
        "THREADS": spec.threads,
        "BATCH_SIZE": spec.batch_size,
        "UBATCH_SIZE": spec.ubatch_size,
        "PARALLEL": spec.parallel,
        "MAX_QUEUE": spec.max_queue,
        "GPU_LAYERS": spec.gpu_layers,
        "RPC": ",".join(spec.rpc),
        "TENSOR_SPLIT": ",".join(f"{share:g}" for share in spec.tensor_split),
        "FLASH_ATTN": spec.flash_attn,
        "CACHE_TYPE_K": spec.cache_type_k,
        "CACHE_TYPE_V": spec.cache_type_v,
        "CACHE_REUSE": spec.cache_reuse,
        "CONTEXT_SHIFT": str(spec.context_shift).lower(),
        "LAST_TOKEN_ALONE": str(spec.last_token_alone).lower(),
        "DEVICE": "none" if spec.devices == () else ",".join(spec.devices or ()),
        "KV_OFFLOAD": str(spec.kv_offload).lower(),
        "OP_OFFLOAD": str(spec.op_offload).lower(),
        "SPEC": spec.speculation,
        "DRAFT": str(spec.draft_path) if spec.draft_path else "",
        "DRAFT_MAX": spec.draft_max,
        "DRAFT_MIN": spec.draft_min,
        "POOLING": spec.pooling,
        "KEEP_ALIVE": "-1",
        "MAX_LOADED": 1,
        "DISCOVER": "false",
        "RPC_IN_PROCESS": "true",
    }
    return {**kept, **{f"LOCALINFER_{key}": str(value) for key, value in env.items() if value != ""}}


class RpcChildBackend(Backend):
    """A GGUF model on RPC workers, in a child ``localinfer serve`` (see the module's docstring)."""

    name: ClassVar[str] = "llamacpp"
    capabilities: ClassVar[Capabilities] = Capabilities(
        **{name: getattr(LlamaCppBackend.capabilities, name) for name in CARRIED}
    )

    def __init__(
        self,
        *,
        home: Path,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        stall_seconds: float = RPC_STALL_TIMEOUT,
    ) -> None:
        self._home = home
        self._log_dir = log_dir
        self._env = dict(env) if env is not None else dict(os.environ)
        self._stall = stall_seconds
        self._spec: LoadSpec | None = None
        self._process: EngineProcess | None = None
        self._starting: EngineProcess | None = None  # a child started and not ready yet
        self._proxy: EngineProxy | None = None
        self._watch: WorkerWatch | None = None
        self._vocab: LlamaModel | None = None
        self._facts: ModelFacts | None = None
        self._lost: dict[str, str] = {}  # endpoint -> why it is taken as gone
        self._restart = asyncio.Lock()

    def preflight(self, spec: LoadSpec) -> None:
        if spec.lora:  # the child serves the model alone: refused at start rather than served without them
            raise ModelLoadError(
                "LoRA adapters are not applied to a model on RPC workers (--rpc)",
                hint="serve the model on this machine to apply --lora, or drop --lora",
            )

    async def load(self, spec: LoadSpec) -> None:
        """Check the workers, start the child for ``spec`` and wait until it serves. Raises RpcWorkerLost for a
        worker that does not answer, ModelLoadError when the child fails to start (with the end of its log)."""
        self.preflight(spec)
        if self._spec is not None:
            raise ModelLoadError("this backend already has a model loaded", hint="unload it first")
        self._vocab = await asyncio.to_thread(LlamaModel.vocab_only, Path(spec.path))
        self._spec = spec
        try:
            await self._start()
        except BaseException:
            await self.unload()
            raise

    async def _start(self) -> None:
        """Start the child for the loaded spec and wait until it serves. An unload meanwhile stops it (and raises
        ModelNotReady): the child is this backend's only once its facts are read and it is still loaded."""
        spec = self._require_spec()
        await asyncio.to_thread(self._check_workers, spec)
        served_name = spec.name if is_valid_name(spec.name) else ""  # else the child names it by its file, as here
        launch = LOCALINFER.launch(str(spec.path), served_name=served_name)
        process = EngineProcess(launch, log_path=self._new_log(), env=child_env(self._env, spec, self._home))
        watch = WorkerWatch(spec.rpc)
        proxy: EngineProxy | None = None
        self._starting = process
        try:
            self._still_loaded(spec)
            process.start()
            proxy = EngineProxy(process.url, process.api_key, alive=lambda: process.alive)  # its port is chosen now
            await process.wait_ready(READY_TIMEOUT)
            status = await _json(proxy, "GET", "/api/localinfer/status")
            self._still_loaded(spec)
            facts = self._facts_from(spec, status)
            await asyncio.to_thread(watch.hold)
            self._still_loaded(spec)
        except BaseException:
            watch.close()
            await process.stop()
            if proxy is not None:
                await proxy.aclose()
            raise
        finally:
            self._starting = None
        self._process, self._proxy, self._watch, self._facts = process, proxy, watch, facts
        placed = next((line for line in reversed(process.log_tail(200).splitlines()) if ": layers " in line), "")
        log.info(
            "%s: %s (in a child localinfer serve, pid %s, log %s)",
            spec.name,
            "layers " + placed.partition(": layers ")[2] if placed else "placed by llama.cpp",
            process.pid,
            process.log_path,
        )
        self._lost.clear()

    def _still_loaded(self, spec: LoadSpec) -> None:
        if self._spec is not spec:
            raise ModelNotReady(f"{spec.name} was unloaded while its child server started")

    def _check_workers(self, spec: LoadSpec) -> None:
        """Every worker answers the handshake (none is in use: the child is not running). Raises RpcWorkerLost."""
        for endpoint in spec.rpc:
            try:
                probe(endpoint)
            except RpcWorkerError as exc:
                self._lost[endpoint] = exc.message
                raise RpcWorkerLost(endpoint, f"{exc.message}; the model on it cannot serve until it is back") from exc
            self._lost.pop(endpoint, None)

    def _facts_from(self, spec: LoadSpec, status: Mapping[str, Any]) -> ModelFacts:
        vocab = self._require_vocab()
        loaded = next((m for m in status.get("loaded") or () if m.get("name") == spec.name), None)
        if loaded is None:
            raise ModelLoadError(f"the child server did not load {spec.name}", hint="see its log")
        vocab.n_ctx = int(loaded.get("context_length") or 0)
        vocab.n_seq_max = int(loaded.get("slots") or 1)
        vocab.n_batch = min(spec.batch_size, vocab.n_ctx) if vocab.n_ctx else spec.batch_size
        vocab.threads = int(loaded.get("threads") or 0)
        vocab.gpu_layers = int(loaded.get("gpu_layers") or 0)
        vocab.cache_types = (str(loaded.get("cache_type_k") or ""), str(loaded.get("cache_type_v") or ""))
        vocab.pooling = spec.pooling
        facts = vocab.facts()
        devices = tuple(device_use(d) for d in loaded.get("devices") or ())
        return dataclasses.replace(facts, model_bytes=int(loaded.get("size_bytes") or 0), devices=devices)

    @property
    def facts(self) -> ModelFacts:
        if self._facts is None:
            raise ModelNotReady("the model is not loaded yet")
        return self._facts

    def rpc_workers(self) -> tuple[WorkerHealth, ...]:
        spec = self._spec
        if spec is None:
            return ()
        return tuple(WorkerHealth(e, "lost" if e in self._lost else "ok") for e in spec.rpc)

    async def generate(self, request: GenerationRequest) -> TokenStream:
        """Stream ``request`` from the child. Raises RpcWorkerLost when a worker is gone (before or during the
        request), InvalidRequest for what the child refuses or an option not carried to it, GenerationFailed when
        the child fails otherwise."""
        refuse_uncarried(request)
        tokens = list(request.tokens) or await self.tokenize(
            request.prompt, add_special=request.add_special, parse_special=request.parse_special
        )
        proxy = await self._serving()
        body = json.dumps(completion_body(tokens, request)).encode()
        answer = await proxy.forward("POST", "/completion", JSON_HEADERS, body)
        pieces = chunks_from(sse_data(answer.body))
        loop = asyncio.get_running_loop()
        progress = _Progress(loop.time())
        watchdog = asyncio.ensure_future(self._watch_stall(progress))
        try:
            if answer.status != 200:
                error = error_for(answer.status, await answer.read(), LOCALINFER.title)
                raise (await self._why(error)) if answer.status == 502 else error  # 502: the proxy lost the child
            while True:
                try:
                    chunk = await anext(pieces, None)
                except ChildStreamBroken as exc:
                    raise await self._why(exc) from exc
                if chunk is None:
                    return
                progress.last = loop.time()
                yield chunk
                progress.last = loop.time()  # a slow reader's time is not the child's
        finally:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
            await pieces.aclose()
            await answer.aclose()  # closes the child's connection, which aborts the request there

    async def _serving(self) -> EngineProxy:
        """The proxy to a child that runs: the one there is, or a new one once every worker answers again.
        Raises RpcWorkerLost while a worker is gone."""
        async with self._restart:
            process = self._process
            if process is not None and process.alive and self._proxy is not None:
                return self._proxy
            if process is not None:
                log.warning("the child serving %s exited: starting it again", self._require_spec().name)
                await self._stop_child()
            await self._start()
            assert self._proxy is not None
            return self._proxy

    async def _watch_stall(self, progress: _Progress) -> None:
        """While a request streams: whenever no piece came for ``stall_seconds``, check the workers, and stop the
        child once one of them is gone (its stream then breaks off: ChildStreamBroken in the request). One task
        per request that sleeps between checks, rather than a timed wait per piece."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.0, progress.last + self._stall - loop.time()))
            if loop.time() - progress.last < self._stall:
                continue  # a piece came meanwhile
            try:
                gone = await self._gone()
            except Exception:  # a check that fails must not end the request: its stream goes on, unwatched
                log.warning("checking the RPC workers failed; no longer watching this request", exc_info=True)
                return
            if gone:
                self._lost.update(gone)
                why = "; ".join(f"{endpoint}: {why}" for endpoint, why in gone.items())
                log.warning("RPC worker gone (%s): stopping the child", why)
                if self._process is not None:
                    await self._process.stop(grace=0)
                return
            progress.last = loop.time()  # every worker answered: check again after another stall

    async def _gone(self) -> dict[str, str]:
        watch = self._watch
        return await asyncio.to_thread(watch.gone) if watch is not None else {}

    async def _why(self, error: Exception) -> Exception:
        """For a transport failure (the child's stream broke off, or the proxy lost it): ``error`` when the child
        still runs; else RpcWorkerLost naming the worker that is gone (asked now), or GenerationFailed with the end
        of the child's log."""
        process = self._process
        if process is None:
            return error
        for _ in range(EXIT_POLLS):  # its connection closes as it aborts, a moment before it has exited
            if not process.alive:
                break
            await asyncio.sleep(EXIT_POLL_SECONDS)
        if process.alive:
            return error
        gone = self._lost or await self._gone()
        if gone:
            self._lost.update(gone)
            endpoint = next(iter(gone))
            return RpcWorkerLost(endpoint, f"RPC worker {endpoint} was lost during the request ({gone[endpoint]})")
        return GenerationFailed(f"the child serving this model exited during the request:\n{process.log_tail()}")

    async def unload(self) -> None:
        """Stop the child (requests in flight end), or the one starting (its start raises ModelNotReady), and free
        the vocabulary."""
        self._spec, self._facts = None, None  # first: a start under way finds itself unloaded
        starting = self._starting
        await self._stop_child()
        if starting is not None:
            await starting.stop(grace=0)  # its wait for readiness ends now
        if self._vocab is not None:
            self._vocab.free()
            self._vocab = None

    async def _stop_child(self) -> None:
        process, proxy, watch = self._process, self._proxy, self._watch
        self._process, self._proxy, self._watch = None, None, None
        if watch is not None:
            watch.close()  # before the child stops: the worker it frees must not take a probe for its next client
        if process is not None:
            await process.stop(grace=10.0)
        if proxy is not None:
            await proxy.aclose()

    def slot_usage(self) -> SlotUsage:
        return SlotUsage()  # the child's slots are its own

    async def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return self._require_vocab().tokenize(text, add_special=add_special, parse_special=parse_special)

    async def detokenize(self, tokens: Sequence[int]) -> list[TokenPiece]:
        vocab = self._require_vocab()
        return [TokenPiece(t, vocab.token_bytes(t)) for t in tokens]

    def _require_spec(self) -> LoadSpec:
        if self._spec is None:
            raise ModelNotReady("the model is not loaded yet")
        return self._spec

    def _require_vocab(self) -> LlamaModel:
        if self._vocab is None:
            raise ModelNotReady("the model is not loaded yet")
        return self._vocab

    def _new_log(self) -> Path:
        log_dir = self._log_dir or Path(tempfile.gettempdir()) / "localinfer"
        log_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="rpc-child-", suffix=".log", dir=log_dir)
        os.close(fd)
        return Path(name)


async def _json(proxy: EngineProxy, method: str, path: str) -> dict[str, Any]:
    answer = await proxy.forward(method, path, [], b"")
    body = await answer.read()
    with contextlib.suppress(ValueError):
        data = json.loads(body)
        if answer.status == 200 and isinstance(data, dict):
            return data
    raise ModelLoadError(f"the child server's {path} answered {answer.status}: {body[:300]!r}")


@dataclasses.dataclass
class _Progress:
    """When the request's last piece came (the event loop's clock)."""

    last: float
