"""One request run on onnxruntime-genai: its generator's token loop, on the backend's inference thread.

The loop is blocking (each ``generate_next_token`` is a forward pass); it hands chunks to the requester's event
loop and checks between tokens whether the requester went away, so closing a stream stops it within a token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from localinfer.backends.onnx.model import GenaiModel
from localinfer.backends.text_stream import TextStream
from localinfer.errors import GenerationFailed, InvalidRequest
from localinfer.types import FinishReason, GenerationOptions, ResponseFormat, Timings, TokenChunk, Usage

log = logging.getLogger(__name__)

Item = TokenChunk | BaseException
Delivery = Callable[[Item], None]


def search_options(options: GenerationOptions, prompt_tokens: int, n_ctx: int, window: int = 0) -> dict[str, Any]:
    """onnxruntime-genai's search options for a request.

    ``max_length`` (prompt and reply) sizes the KV buffer the generator allocates up front: the prompt plus
    ``max_tokens``, never more than the context, and at least a sliding-window model's window. Temperature 0 is
    greedy; otherwise top-k (0: off), top-p, temperature, the seed when given and the repeat penalty. min-p and
    the presence and frequency penalties have no counterpart here and are not applied.
    """
    wanted = prompt_tokens + options.max_tokens if options.max_tokens is not None else n_ctx
    max_length = min(max(wanted, window, prompt_tokens + 1), n_ctx)
    search: dict[str, Any] = {"max_length": max_length}
    if options.ignore_eos:
        search["min_length"] = max_length
    sampling = options.sampling
    if sampling.repeat_penalty != 1.0:
        search["repetition_penalty"] = sampling.repeat_penalty
    if sampling.temperature <= 0:
        search["do_sample"] = False
        return search
    search.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=max(sampling.top_k, 0))
    if sampling.seed is not None:
        search["random_seed"] = sampling.seed & 0x7FFFFFFF
    return search


def guidance(response_format: ResponseFormat) -> tuple[str, str] | None:
    """The (type, data) onnxruntime-genai's guidance takes to hold the reply to a JSON format; None for free text."""
    if response_format.type == "json_object":
        return "json_schema", json.dumps({"type": "object"})
    if response_format.type == "json_schema":
        return "json_schema", json.dumps(response_format.schema or {})
    return None


def delivery(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Item]) -> Delivery:
    """Hand items from the inference thread to ``queue`` on ``loop``; dropped once that loop is closed."""

    def deliver(item: Item) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:
            log.debug("dropped a chunk for a closed event loop")

    return deliver


@dataclass(eq=False)
class Job:
    request_id: str
    prompt: list[int]
    search: dict[str, Any]
    guidance: tuple[str, str] | None
    max_tokens: int | None
    ignore_eos: bool
    text: TextStream
    deliver: Delivery
    cancelled: threading.Event = field(default_factory=threading.Event)
    generated: int = 0
    sampled: int = 0  # tokens sampled, an end-of-generation one included (Timings.predicted_n)
    t_first_token: float = 0.0
    t_last_token: float = 0.0


def run(model: GenaiModel, job: Job) -> None:
    """Generate ``job`` to its end, a stop string, its token limit or its cancellation; never raises."""
    generator = None
    try:
        params = model.og.GeneratorParams(model.model)
        params.set_search_options(**job.search)
        if job.guidance is not None:
            try:
                params.set_guidance(*job.guidance)
            except Exception as exc:
                raise InvalidRequest(f"the JSON schema cannot be enforced: {exc}", param="response_format") from exc
        start = time.perf_counter()
        generator = model.og.Generator(model.model, params)
        generator.append_tokens(job.prompt)
        _loop(model, job, generator, start)
    except InvalidRequest as exc:
        job.deliver(exc)
    except Exception as exc:
        log.exception("request %s failed", job.request_id)
        job.deliver(GenerationFailed(f"generation failed: {exc}"))
    finally:
        del generator  # frees the request's KV buffer now, not when the thread next allocates


def _loop(model: GenaiModel, job: Job, generator: Any, start: float) -> None:
    stream = model.create_stream()
    prefilled = time.perf_counter()
    while not job.cancelled.is_set():
        generator.generate_next_token()
        token = int(generator.get_next_tokens()[0])
        job.t_last_token = time.perf_counter()
        job.t_first_token = job.t_first_token or job.t_last_token
        job.sampled += 1
        if token in model.eos_ids and not job.ignore_eos:
            _finish(job, "stop", start, prefilled)
            return
        job.generated += 1
        text = job.text.push(stream.decode(token).encode("utf-8"))
        if text:
            job.deliver(TokenChunk(text))
        if job.text.stopped:
            _finish(job, "stop", start, prefilled)
            return
        if (job.max_tokens is not None and job.generated >= job.max_tokens) or generator.is_done():
            _finish(job, "length", start, prefilled)
            return
    log.debug("request %s cancelled after %d tokens", job.request_id, job.generated)


def _finish(job: Job, reason: FinishReason, start: float, prefilled: float) -> None:
    """Send the held-back text and the closing chunk; timings as ``Timings`` means them (the first token ends the
    prompt's time, the rest is generation)."""
    first = job.t_first_token or prefilled
    timings = Timings(
        prompt_ms=(first - start) * 1000.0,
        predicted_ms=max(job.t_last_token - first, 1e-6) * 1000.0 if job.sampled else 0.0,
        prompt_n=len(job.prompt),
        predicted_n=job.sampled,
    )
    usage = Usage(len(job.prompt), job.generated)
    job.deliver(TokenChunk(job.text.flush(), finish_reason=reason, usage=usage, timings=timings))
