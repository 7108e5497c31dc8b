"""The ONNX Runtime backend: onnxruntime-genai model folders (``genai_config.json``), one request at a time.

Each request gets its own onnxruntime-genai Generator, sized for that request (prompt plus ``max_tokens``)
rather than the whole context. Its blocking token loop runs on the backend's one inference thread; requests
that arrive meanwhile wait their turn in a bounded queue.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

from localinfer.backends.base import Backend, Capabilities, LoadSpec, ModelFacts, SlotUsage
from localinfer.backends.chunks import ChunkQueue, relay
from localinfer.backends.onnx import job as jobs
from localinfer.backends.onnx.facts import model_facts
from localinfer.backends.onnx.model import GenaiModel
from localinfer.backends.text_stream import TextStream
from localinfer.errors import ContextLengthExceeded, GenerationFailed, InvalidRequest, ModelNotReady, QueueFull
from localinfer.models.metadata.hf import read_json
from localinfer.models.metadata.onnx import model_folder, sliding_window
from localinfer.types import GenerationRequest, TokenStream

log = logging.getLogger(__name__)


class OnnxBackend(Backend):
    name: ClassVar[str] = "onnx"
    capabilities: ClassVar[Capabilities] = Capabilities(formats=("onnx",), grammar=True, batching=False)

    def __init__(self) -> None:
        self._model: GenaiModel | None = None
        self._facts: ModelFacts | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._turn = asyncio.Lock()
        self._waiting = 0
        self._max_queue = 0
        self._window = 0
        self._current: jobs.Job | None = None

    async def load(self, spec: LoadSpec) -> None:
        folder = model_folder(Path(spec.path))
        model = await asyncio.to_thread(GenaiModel.load, folder, spec.provider, spec.threads)
        self._facts = model_facts(folder, spec, threads=spec.threads)
        self._window = sliding_window(read_json(folder / "genai_config.json"))
        self._max_queue = spec.max_queue
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx-inference")
        self._model = model
        log.info("%s loaded on %s", folder.name, model.provider)

    @property
    def facts(self) -> ModelFacts:
        if self._facts is None:
            raise ModelNotReady("the model is not loaded yet")
        return self._facts

    @property
    def provider(self) -> str | None:
        """The execution provider the model runs on, once loaded."""
        return self._model.provider if self._model is not None else None

    def _loaded(self) -> tuple[GenaiModel, ThreadPoolExecutor, ModelFacts]:
        if self._model is None or self._executor is None or self._facts is None:
            raise ModelNotReady("the model is not loaded yet", hint="retry when GET /health answers 200")
        return self._model, self._executor, self._facts

    async def generate(self, request: GenerationRequest) -> TokenStream:
        model, _, facts = self._loaded()
        prompt = model.encode(request.prompt)
        bos = model.tokenizer.bos_token_id
        if request.add_special and facts.add_bos and bos >= 0 and (not prompt or prompt[0] != bos):
            prompt.insert(0, int(bos))
        if not prompt:
            raise InvalidRequest("the prompt is empty", param="prompt")
        if len(prompt) >= facts.n_ctx:
            raise ContextLengthExceeded(n_prompt=len(prompt), n_ctx=facts.n_ctx)
        options = request.options
        if options.logprobs is not None:
            raise InvalidRequest("log-probabilities are not available for ONNX models", param="logprobs")
        if self._turn.locked() and self._waiting >= self._max_queue:
            raise QueueFull(f"{self._waiting} requests are already waiting for this model", hint="retry later")
        self._waiting += 1
        try:
            await self._turn.acquire()
        finally:
            self._waiting -= 1
        loop = asyncio.get_running_loop()
        chunks: ChunkQueue = asyncio.Queue()
        job = jobs.Job(
            request_id=request.request_id,
            prompt=prompt,
            search=jobs.search_options(options, len(prompt), facts.n_ctx, self._window),
            guidance=jobs.guidance(options.response_format),
            max_tokens=options.max_tokens,
            ignore_eos=options.ignore_eos,
            text=TextStream(options.stop),
            deliver=jobs.delivery(loop, chunks),
        )
        try:
            model, executor, _ = self._loaded()  # unloaded while this request waited its turn?
            running = loop.run_in_executor(executor, jobs.run, model, job)
        except BaseException:
            self._turn.release()
            raise
        self._current = job
        running.add_done_callback(lambda _: self._job_done(job))
        try:
            async for chunk in relay(chunks):
                yield chunk
        finally:
            job.cancelled.set()

    def _job_done(self, job: jobs.Job) -> None:
        """On the event loop, once the inference thread is done with ``job``: the next request's turn."""
        if self._current is job:
            self._current = None
        self._turn.release()

    async def unload(self) -> None:
        current = self._current
        if current is not None:
            current.cancelled.set()
            current.deliver(GenerationFailed("the model was unloaded while generating"))
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True)
        self._model = None  # the generator is gone with the thread's last job; this frees the weights

    def slot_usage(self) -> SlotUsage:
        if self._model is None:
            return SlotUsage()
        busy = 1 if self._turn.locked() else 0
        return SlotUsage(processing=busy, idle=1 - busy, waiting=self._waiting)
