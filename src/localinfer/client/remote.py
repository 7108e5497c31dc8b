"""``HttpClient``: the ``InferenceClient`` protocol over HTTP, to a running ``localinfer serve``.

What each call uses on the server:

- ``chat``: ``POST /v1/chat/completions`` streamed (SSE) with ``stream_options.include_usage``; text deltas become
  ``TokenChunk``s (a reasoning model's ``delta.reasoning_content`` their ``reasoning``) and a last chunk carries
  the finish reason, the usage and the server's ``timings``. The think switch and budget go as the server reads
  them (``chat_template_kwargs.enable_thinking``, ``reasoning_budget_tokens``), and earlier turns' thinking as
  ``reasoning_content``. Closing the iterator early closes the connection, which makes the server abort the
  generation.
- ``models``: ``GET /api/tags`` and ``GET /api/ps`` (Ollama's shapes). A remote model has no local ``path`` (``""``)
  and no ``source``; its ``context_length`` is known only while it is loaded.
- ``load``: a one-token ``POST /v1/completions``, which makes the server load the model if it has not yet. Unlike
  ``LocalClient.load`` it does not unload the server's other models (others may be using them), and it cannot
  change the context length the server loads models with.
- ``pull``: ``POST /api/pull`` NDJSON progress lines as ``ProgressEvent``s; closing the iterator early hangs up,
  which stops the server's pull (what was downloaded is kept there for a resume).
- ``remove``: ``DELETE /api/delete``; it returns 0, as the bytes freed on the server are not reported.
- ``status``: ``GET /api/localinfer/status``, with ``where`` set to this client's URL.

Errors come back as the ``LocalInferError`` classes the server raised, told apart by the status and the OpenAI
error ``code``; a server that cannot be reached is a ``LocalInferError`` naming the URL.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncGenerator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import httpx

from localinfer.backends.base import DeviceUse, LoraState
from localinfer.client.base import ClientStatus, LoadedModelStatus
from localinfer.client.chat_body import chat_body
from localinfer.client.remote_tools import ToolCallDeltas
from localinfer.errors import (
    GenerationFailed,
    InvalidRequest,
    LocalInferError,
    ModelLoadError,
    ModelNotFound,
    ModelNotReady,
    PullError,
    QueueFull,
    Unauthorized,
)
from localinfer.models.library import untagged
from localinfer.progress import ProgressEvent
from localinfer.types import (
    OLLAMA_FORMAT_NAMES,
    ChatRequest,
    FinishReason,
    ModelInfo,
    Timings,
    TokenChunk,
    Usage,
)

_FORMATS = {said: ours for ours, said in OLLAMA_FORMAT_NAMES.items()}  # Ollama's format names back to ours

_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
_STREAM_TIMEOUT = httpx.Timeout(None, connect=5.0)  # a model may load, or a pull stall, for minutes
_UNREACHABLE_HINT = "start it with 'localinfer serve' or check --host"

# The OpenAI error ``code`` our server sends -> the error class it came from.
_BY_CODE: dict[str, type[LocalInferError]] = {
    "queue_full": QueueFull,
    "model_loading": ModelNotReady,
    "model_load_failed": ModelLoadError,
    "generation_failed": GenerationFailed,
    "invalid_api_key": Unauthorized,
}


class HttpClient:
    """A client of the ``localinfer serve`` at ``url`` (``http://127.0.0.1:8080``; a bare ``host:port`` and a
    trailing ``/v1`` are accepted). ``api_key`` is sent as a bearer key."""

    def __init__(self, url: str, *, api_key: str | None = None) -> None:
        self._url = normalize_url(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self._url, headers=headers, timeout=_TIMEOUT)

    @property
    def where(self) -> str:
        return self._url

    async def chat(self, request: ChatRequest) -> AsyncGenerator[TokenChunk, None]:
        finish: FinishReason | None = None
        usage: Usage | None = None
        timings: Timings | None = None
        thought = 0  # the pieces of thinking streamed: one a token
        done = False
        calls = ToolCallDeltas()
        try:
            async with self._http.stream(
                "POST", "/v1/chat/completions", json=chat_body(request), timeout=_STREAM_TIMEOUT
            ) as response:
                await self._check(response, model=request.model)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:") :].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    event = json.loads(data)
                    if "error" in event:
                        raise error_from_body(event, status=None, model=request.model)
                    usage = _usage(event.get("usage")) or usage
                    timings = _timings(event.get("timings")) or timings
                    for choice in event.get("choices") or ():
                        delta = choice.get("delta") or {}
                        reasoning, text = delta.get("reasoning_content") or "", delta.get("content") or ""
                        if reasoning or text:
                            thought += 1 if reasoning else 0
                            yield TokenChunk(text, reasoning=reasoning)
                        calls.feed(delta.get("tool_calls"))
                        if choice.get("finish_reason"):
                            finish = "length" if choice["finish_reason"] == "length" else "stop"
        except httpx.TransportError as exc:
            raise self._transport_error(exc) from exc
        if not done:
            raise LocalInferError(
                f"the reply from localinfer at {self._url} ended early", hint="check the server's log and retry"
            )
        if usage is not None and thought and not usage.reasoning_tokens:
            usage = dataclasses.replace(usage, reasoning_tokens=min(thought, usage.completion_tokens))
        found = calls.calls()
        finish = "tool_calls" if found else finish
        yield TokenChunk("", finish_reason=finish or "stop", usage=usage, timings=timings, tool_calls=found)

    async def models(self) -> list[ModelInfo]:
        tags = await self._get("/api/tags")
        # Ollama's listings tag every name (smollm2:latest); localinfer's names are what the server calls the models
        running = {untagged(str(m.get("name"))): m for m in (await self._get("/api/ps")).get("models") or ()}
        senses = await self._modalities()
        models = []
        for tag in tags.get("models") or ():
            name = untagged(str(tag.get("name") or tag.get("model") or ""))
            loaded = running.get(name)
            details = tag.get("details") or {}
            models.append(
                ModelInfo(
                    name=name,
                    path="",
                    size_bytes=int(tag.get("size") or 0),
                    quantization=details.get("quantization_level") or None,
                    loaded=loaded is not None,
                    created=_timestamp(tag.get("modified_at")),
                    context_length=loaded.get("context_length") if loaded is not None else None,
                    format=_FORMATS.get(str(details.get("format")), "gguf"),
                    modalities=senses.get(name, ()),
                )
            )
        return sorted(models, key=lambda m: (not m.loaded, m.name))

    async def _modalities(self) -> dict[str, tuple[str, ...]]:
        """What each model the server lists as ``multimodal`` (llama-server's list) takes besides text, as its
        ``/api/show`` capabilities say (``vision``, ``audio``); models of text alone are not asked about."""
        listed = (await self._get("/v1/models")).get("models") or ()
        multimodal = [str(m.get("name")) for m in listed if "multimodal" in (m.get("capabilities") or ())]
        senses = {}
        for name in multimodal:
            shown = (await self._request("POST", "/api/show", model=name, json={"model": name})).json()
            senses[name] = tuple(c for c in shown.get("capabilities") or () if c in ("vision", "audio"))
        return senses

    async def load(self, model: str, *, context_length: int | None = None) -> None:
        """Have the server load ``model``. ``context_length`` is ignored: a server keeps the context it was
        started with (``--ctx-size``)."""
        body = {"model": model, "prompt": " ", "max_tokens": 1, "temperature": 0}
        await self._request("POST", "/v1/completions", model=model, json=body, timeout=_STREAM_TIMEOUT)

    async def pull(self, ref: str) -> AsyncGenerator[ProgressEvent, None]:
        try:
            async with self._http.stream(
                "POST", "/api/pull", json={"model": ref, "stream": True}, timeout=_STREAM_TIMEOUT
            ) as response:
                await self._check(response, fallback=PullError)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if "error" in event:
                        raise error_from_body(event, status=None, fallback=PullError)
                    yield ProgressEvent(
                        status=str(event.get("status") or ""),
                        total=event.get("total"),
                        completed=event.get("completed"),
                        digest=event.get("digest"),
                    )
        except httpx.TransportError as exc:
            raise self._transport_error(exc) from exc

    async def has_model(self, model: str) -> bool:
        """Whether the server has ``model`` by that very name (Ollama's /api/show: a name nobody serves is a 404
        there even on a server of one model, which answers any name on its OpenAI routes)."""
        try:
            await self._request("POST", "/api/show", model=model, json={"model": model})
        except ModelNotFound:
            return False
        return True

    async def remove(self, model: str) -> int:
        await self._request("DELETE", "/api/delete", model=model, json={"model": model})
        return 0

    async def unload(self, model: str) -> bool:
        """Unload ``model`` once its requests in flight end, as ``ollama stop`` (/models/unload); False when it is
        not loaded. Raises ModelNotFound for a name the server does not know."""
        body = (await self._request("POST", "/models/unload", model=model, json={"model": model})).json()
        return bool(body.get("success")) if isinstance(body, dict) else False

    async def status(self) -> ClientStatus:
        body = await self._get("/api/localinfer/status")
        loaded = tuple(
            LoadedModelStatus(
                name=str(m.get("name") or ""),
                backend=str(m.get("backend") or ""),
                context_length=int(m.get("context_length") or 0),
                slots=int(m.get("slots") or 0),
                threads=m.get("threads"),
                gpu_layers=int(m.get("gpu_layers") or 0),
                size_bytes=int(m.get("size_bytes") or 0),
                memory_bytes=int(m.get("memory_bytes") or 0),
                vram_bytes=int(m.get("vram_bytes") or 0),
                cache_type_k=str(m.get("cache_type_k") or ""),
                cache_type_v=str(m.get("cache_type_v") or ""),
                devices=tuple(
                    DeviceUse(str(d.get("name") or ""), str(d.get("where") or ""), int(d.get("size_bytes") or 0))
                    for d in m.get("devices") or ()
                ),
                adapters=tuple(
                    LoraState(int(a.get("id") or 0), Path(str(a.get("path") or "")), float(a.get("scale") or 0.0))
                    for a in m.get("adapters") or ()
                ),
                pinned=bool(m.get("pinned")),
                in_flight=int(m.get("in_flight") or 0),
                expires_in=m.get("expires_in"),
            )
            for m in body.get("loaded") or ()
        )
        return ClientStatus(
            where=self._url,
            loaded=loaded,
            memory_used=body.get("memory_used"),
            memory_total=body.get("memory_total"),
            memory_available=body.get("memory_available"),
            serving=body.get("serving"),
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def _get(self, path: str) -> dict[str, Any]:
        body = (await self._request("GET", path)).json()
        return cast(dict[str, Any], body) if isinstance(body, dict) else {}

    async def _request(self, method: str, path: str, *, model: str | None = None, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._transport_error(exc) from exc
        await self._check(response, model=model)
        return response

    async def _check(
        self, response: httpx.Response, *, model: str | None = None, fallback: type[LocalInferError] = LocalInferError
    ) -> None:
        if response.is_success:
            return
        await response.aread()
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text or response.reason_phrase}
        raise error_from_body(body, status=response.status_code, model=model, fallback=fallback)

    def _transport_error(self, exc: httpx.TransportError) -> LocalInferError:
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return LocalInferError(f"cannot reach localinfer at {self._url}", hint=_UNREACHABLE_HINT)
        return LocalInferError(
            f"the connection to localinfer at {self._url} failed: {exc or type(exc).__name__}",
            hint="check that the server is still running",
        )


def normalize_url(url: str) -> str:
    """``http://host:port`` from what a user may type: a bare ``host:port``, a trailing ``/`` or ``/v1``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    return url.removesuffix("/v1")


def error_from_body(
    body: Any, *, status: int | None, model: str | None = None, fallback: type[LocalInferError] = LocalInferError
) -> LocalInferError:
    """The ``LocalInferError`` an error response (OpenAI's ``{"error": {...}}`` or Ollama's ``{"error": "..."}``)
    stands for. The server writes ``"<message>; <hint>"``: they are split again here."""
    error = body.get("error") if isinstance(body, dict) else None
    code: str | None = None
    param: str | None = None
    if isinstance(error, dict):
        text = str(error.get("message") or "")
        code = error.get("code")
        param = error.get("param")
    else:
        text = str(error or body)
    message, _, hint = text.partition("; ")
    if code == "model_not_found" or (status == 404 and message.startswith("model '")):
        return ModelNotFound(_quoted(message) or model or "?", hint=hint or None)
    if status == 404:
        return LocalInferError(message, hint=hint or "the server may be an older localinfer; update it")
    if code in _BY_CODE:
        return _BY_CODE[code](message, hint=hint or None)
    if status == 401:
        return Unauthorized(message, hint=hint or None)
    if status in (400, 422) or code == "context_length_exceeded":
        return InvalidRequest(message, param=param, hint=hint or None)
    if status == 503 and isinstance(error, dict) and fallback is LocalInferError:  # OpenAI-shaped: a busy model
        return ModelNotReady(message, hint=hint or None)
    return fallback(message, hint=hint or None)


def _usage(body: Any) -> Usage | None:
    if not isinstance(body, dict):
        return None
    details = body.get("prompt_tokens_details") or {}
    completion = body.get("completion_tokens_details") or {}  # OpenAI's reasoning_tokens, where a server sends it
    return Usage(
        prompt_tokens=int(body.get("prompt_tokens") or 0),
        completion_tokens=int(body.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
        reasoning_tokens=int(completion.get("reasoning_tokens") or 0),
    )


def _timings(body: Any) -> Timings | None:
    if not isinstance(body, dict):
        return None
    return Timings(
        prompt_ms=float(body.get("prompt_ms") or 0.0),
        predicted_ms=float(body.get("predicted_ms") or 0.0),
        prompt_n=int(body.get("prompt_n") or 0),
        predicted_n=int(body.get("predicted_n") or 0),
    )


def _timestamp(text: Any) -> int:
    if not isinstance(text, str) or not text:
        return 0
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def _quoted(message: str) -> str | None:
    """``x`` from ``model 'x' not found``; None when the message quotes nothing."""
    _, quote, rest = message.partition("'")
    name = rest.rpartition("'")[0] if quote else ""
    return name or None
