"""What an engine has served, as Prometheus metrics: recorded in one place, around every token stream it returns.

Per model: requests by route and outcome, prompt, cached prompt and generated tokens, time to first token and time
between tokens (histograms); and, read from the backends when scraped, requests waiting for a slot and busy slots.
Each engine has its own registry, so two engines (two tests) never share counts. The server renders it; nothing
here knows HTTP, except the route a request came by, which the server names with ``set_route``.

Requests a server relays to an engine process (vLLM, SGLang, TGI, TensorRT-LLM) as they are are counted the same way,
read from the answers as they pass (``observe_relayed``, relay_metrics.py): the route is the one the request matched
(``relayed_route``), never the client's own spelling of its path.

Beside these ``localinfer_*`` series, ``render`` writes llama-server's own (``llamacpp:prompt_tokens_total``...,
llama_metrics.py), so a Grafana dashboard made for llama-server works on localinfer's ``/metrics`` unchanged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import aclosing
from contextvars import ContextVar
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from localinfer.backends.base import DecodeStats, Relay, RelayedAnswer, SlotUsage
from localinfer.engine.llama_metrics import LlamaServerSeries
from localinfer.engine.relay_metrics import RelayedReading, relayed_route
from localinfer.errors import InvalidRequest
from localinfer.types import TokenStream

IN_PROCESS: Final = "in-process"  # the route of a request that came by no HTTP route (the TUI, LocalClient)

_route: ContextVar[str] = ContextVar("localinfer_route", default=IN_PROCESS)

# Seconds. First tokens wait for a prompt's prefill (milliseconds to a minute on a CPU); later ones for one step.
TTFT_BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
TOKEN_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)

UsageByModel = Callable[[], Mapping[str, SlotUsage]]


def set_route(route: str) -> None:
    """Name the route (``/v1/chat/completions``, ``/completion``...) the current request came by: the streams the
    engine returns from now on in this task (and the tasks it starts) are counted under it."""
    _route.set(route)


class EngineMetrics:
    def __init__(self, usage: UsageByModel) -> None:
        """``usage`` says, when scraped, how busy each loaded model's slots are."""
        self.started = time.time()  # when this engine began serving (Unix seconds)
        self._usage = usage
        self._llama = LlamaServerSeries()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = Counter(
            "localinfer_requests",
            "Generation requests, by route and outcome",
            ["model", "route", "outcome"],
            registry=r,
        )
        self._prompt = Counter("localinfer_prompt_tokens", "Prompt tokens of finished requests", ["model"], registry=r)
        self._cached = Counter(
            "localinfer_prompt_tokens_cached",
            "Prompt tokens reused from the cache, not computed",
            ["model"],
            registry=r,
        )
        self._generated = Counter("localinfer_generated_tokens", "Tokens generated", ["model"], registry=r)
        self._drafted = Counter(
            "localinfer_draft_tokens", "Speculative decoding: draft tokens the model verified", ["model"], registry=r
        )
        self._draft_kept = Counter(
            "localinfer_draft_tokens_accepted",
            "Speculative decoding: draft tokens the model kept",
            ["model"],
            registry=r,
        )
        self._shared = Counter(
            "localinfer_prompt_tokens_shared",
            "Prompt tokens copied from another slot's cache (part of the cached ones)",
            ["model"],
            registry=r,
        )
        self._shifted = Counter(
            "localinfer_prompt_tokens_shifted",
            "Prompt tokens moved to new positions in a slot's cache rather than computed (part of the cached ones)",
            ["model"],
            registry=r,
        )
        self._media = Counter(
            "localinfer_media_tokens",
            "Image and sound embeddings decoded through a projector (those reused from a cache are not)",
            ["model"],
            registry=r,
        )
        self._encoding = Counter(
            "localinfer_media_encode_seconds", "Time the projector spent encoding them", ["model"], registry=r
        )
        self._ttft = Histogram(
            "localinfer_time_to_first_token_seconds",
            "From a request reaching the engine to its first chunk",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self._per_token = Histogram(
            "localinfer_time_per_output_token_seconds",
            "Between successive chunks of a generation (one token each, but where a stop string's start is held back)",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        r.register(_SlotCollector(usage))

    def track(self, model: str, stats: DecodeStats | None) -> None:
        """Count from now on what ``model``'s newly loaded decode loop does (``stats``: its backend's, None where it
        has none), in llama-server's series."""
        self._llama.track(model, stats)

    def render(self, model: str | None = None) -> bytes:
        """Every series in Prometheus' text format: the ``localinfer_*`` ones of every model, then llama-server's
        ``llamacpp:*`` ones over every model, or ``model``'s alone (llama_metrics.py says how)."""
        return generate_latest(self.registry) + self._llama.render(self._usage(), model).encode()

    async def observe(self, model: str, chunks: TokenStream, *, started: float) -> TokenStream:
        """``chunks`` as they come, counted for ``model``; ``started`` is when the request reached the engine
        (``time.perf_counter()``). Outcomes: ``stop``, ``length``, ``invalid_request`` (refused), ``error``
        (failed), ``cancelled`` (the reader closed the stream before its end)."""
        route = _route.get()
        outcome = "error"
        last: float | None = None
        try:
            async with aclosing(chunks):
                async for chunk in chunks:
                    if chunk.progress is not None:  # the prompt's progress: no token yet
                        yield chunk
                        continue
                    now = time.perf_counter()
                    if last is None:
                        self._ttft.labels(model).observe(now - started)
                    else:
                        self._per_token.labels(model).observe(now - last)
                    last = now
                    if chunk.finish_reason is not None:
                        outcome = chunk.finish_reason
                        if chunk.usage is not None:
                            self._prompt.labels(model).inc(chunk.usage.prompt_tokens)
                            self._cached.labels(model).inc(chunk.usage.cached_tokens)
                            self._generated.labels(model).inc(chunk.usage.completion_tokens)
                            self._llama.count_request(model, chunk.usage, chunk.timings)
                        if chunk.timings is not None:
                            self._drafted.labels(model).inc(chunk.timings.draft_n)
                            self._draft_kept.labels(model).inc(chunk.timings.draft_n_accepted)
                            self._shared.labels(model).inc(chunk.timings.cache_shared_n)
                            self._shifted.labels(model).inc(chunk.timings.cache_shifted_n)
                            self._media.labels(model).inc(chunk.timings.media_n)
                            self._encoding.labels(model).inc(chunk.timings.encode_ms / 1000.0)
                    yield chunk
        except (GeneratorExit, asyncio.CancelledError):
            if outcome == "error":  # closed (or its reader cancelled) before its last chunk
                outcome = "cancelled"
            raise
        except InvalidRequest:
            outcome = "invalid_request"
            raise
        finally:
            self._requests.labels(model, route, outcome).inc()

    def metered(self, model: str, relay: Relay) -> Relay:
        """``relay`` (an engine process's), each answer it returns counted for ``model`` as ``observe`` counts
        a stream: outcome by route, tokens from the usage the engine reports, time to the first token."""
        return _MeteredRelay(self, model, relay)

    async def observe_relayed(
        self, model: str, route: str, answer: RelayedAnswer, *, started: float
    ) -> AsyncIterator[bytes]:
        """``answer``'s body as it comes, unchanged, counted for ``model`` under ``route`` (``relayed_route``'s).
        Outcomes as ``observe``'s; an answer cut short by the engine (its process gone) is ``error``. A whole
        (not streamed) answer's last chunk is held until it is counted, so a client that has the whole answer
        finds it in ``/metrics`` (a stream's end comes after its last chunk, once it is counted)."""
        content_type = next((v for k, v in answer.headers if k.lower() == "content-type"), "")
        reading = RelayedReading(answer.status, content_type.startswith("text/event-stream"))
        held = b""
        try:
            async for chunk in answer.body:
                if reading.feed(chunk):
                    self._ttft.labels(model).observe(time.perf_counter() - started)
                if reading.is_sse:
                    yield chunk
                else:
                    if held:
                        yield held
                    held = chunk
            reading.end()
        except (GeneratorExit, asyncio.CancelledError):
            reading.outcome = reading.outcome or "cancelled"
            raise
        except Exception:
            reading.outcome = "error"
            raise
        finally:
            self._requests.labels(model, route, reading.outcome or "error").inc()
            if reading.usage is not None:
                self._prompt.labels(model).inc(reading.usage.prompt_tokens)
                self._cached.labels(model).inc(reading.usage.cached_tokens)
                self._generated.labels(model).inc(reading.usage.completion_tokens)
                self._llama.count_request(model, reading.usage, None)
        if held:
            yield held


class _MeteredRelay:
    """A relay whose answers are counted (``EngineMetrics.metered``)."""

    def __init__(self, metrics: EngineMetrics, model: str, relay: Relay) -> None:
        self._metrics, self._model, self._relay = metrics, model, relay

    async def forward(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> RelayedAnswer:
        started = time.perf_counter()
        answer = await self._relay.forward(method, path, headers, body, query)
        counted = self._metrics.observe_relayed(self._model, relayed_route(path), answer, started=started)
        return _CountedAnswer(answer, counted)


class _CountedAnswer:
    def __init__(self, answer: RelayedAnswer, body: AsyncIterator[bytes]) -> None:
        self._answer, self._body = answer, body

    @property
    def status(self) -> int:
        return self._answer.status

    @property
    def headers(self) -> list[tuple[str, str]]:
        return self._answer.headers

    @property
    def body(self) -> AsyncIterator[bytes]:
        return self._body

    async def aclose(self) -> None:
        aclose = getattr(self._body, "aclose", None)
        if aclose is not None:
            await aclose()
        await self._answer.aclose()


class _SlotCollector(Collector):
    def __init__(self, usage: UsageByModel) -> None:
        self._usage = usage

    def describe(self) -> Iterator[Metric]:
        return iter(self._families({}))

    def collect(self) -> Iterator[Metric]:
        return iter(self._families(self._usage()))

    @staticmethod
    def _families(usage: Mapping[str, SlotUsage]) -> list[Metric]:
        waiting = GaugeMetricFamily(
            "localinfer_requests_waiting", "Requests waiting for a free slot (queue depth)", labels=["model"]
        )
        busy = GaugeMetricFamily("localinfer_slots_busy", "Slots generating or prefilling now", labels=["model"])
        total = GaugeMetricFamily("localinfer_slots", "Slots of the loaded model", labels=["model"])
        for model, slots in sorted(usage.items()):
            waiting.add_metric([model], slots.waiting)
            busy.add_metric([model], slots.processing)
            total.add_metric([model], slots.processing + slots.idle)
        return [waiting, busy, total]
