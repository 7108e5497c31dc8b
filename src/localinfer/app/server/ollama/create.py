"""Ollama's routes that make models, as the ``ollama`` client and Open WebUI's model editor use them.

- ``HEAD /api/blobs/sha256:<hex>``: 200 when the store holds that blob, else 404.
- ``POST /api/blobs/sha256:<hex>``: the body is the file; stored as that blob when its sha256 is the one named
  (201), else 400 and nothing kept. The body is streamed to disk, never held in memory, whatever its size.
- ``POST /api/create {"model", "from" | "files", "adapters", "template", "system", "parameters", "messages",
  "license", "quantize", "stream"}``: ``localinfer create`` (models/create.py). ``from`` is a model name or a Hub
  or ``pypi:`` reference (never a path); ``files`` and ``adapters`` map file names to the digests of uploaded
  blobs (GGUF only). Progress as NDJSON ``{"status"}`` lines ending with ``{"status": "success"}``, or that last
  object alone with ``"stream": false``. Nothing is registered unless the whole model could be made.
- ``POST /api/copy {"source", "destination"}``: ``localinfer cp``; 200 with an empty body.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Field

from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.ollama.routes import _client, progress_answer
from localinfer.app.server.ollama.wire import ModelBody, _Wire, json_body
from localinfer.errors import InvalidRequest, ModelfileError
from localinfer.models.create import CreateSpec
from localinfer.models.modelfile import parameter_value
from localinfer.models.store import ModelStore

router = APIRouter(prefix="/api", route_class=FastJSONRoute)
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")


class MessageBody(_Wire):
    role: str
    content: str = ""


class CreateBody(ModelBody):
    from_: str | None = Field(None, alias="from")
    files: dict[str, str] | None = None
    adapters: dict[str, str] | None = None
    template: str | None = None
    system: str | None = None
    parameters: dict[str, Any] | None = None
    messages: list[MessageBody] | None = None
    license: str | list[str] | None = None
    quantize: str | None = None
    quantization: str | None = None  # the field's name before Ollama 0.5
    stream: bool = True
    modelfile: str | None = None  # Ollama's form before 0.5

    def spec(self, store: ModelStore) -> CreateSpec:
        """What to make. Raises InvalidRequest (a 400) for a path in ``from``, a blob not uploaded, a parameter
        localinfer does not honour or of the wrong type, the old ``modelfile`` form."""
        if self.modelfile:
            raise InvalidRequest(
                "the modelfile field is Ollama's form before 0.5: send from, system, parameters... instead",
                param="modelfile",
            )
        if self.from_ and self.files:
            raise InvalidRequest("give from or files, not both", param="from")
        base: str | tuple[Path, ...] = self.from_ or _blobs(store, self.files or {}, "files")
        if not base:
            raise InvalidRequest("from or files is required", param="from")
        parameters = {}
        for name, value in (self.parameters or {}).items():
            try:
                parameters[name] = parameter_value(name, value)
            except ModelfileError as exc:
                raise InvalidRequest(exc.message, param=f"parameters.{name}", hint=exc.hint) from None
        licenses = [self.license] if isinstance(self.license, str) else self.license
        return CreateSpec(
            base=base,
            adapters=_blobs(store, self.adapters or {}, "adapters"),
            system=self.system,
            template=self.template,
            parameters=parameters,
            messages=tuple((m.role, m.content) for m in self.messages) if self.messages is not None else None,
            license=tuple(licenses) if licenses is not None else None,
            quantize=self.quantize or self.quantization,
            names_only=True,  # a name from the network never becomes a path
        )


class CopyBody(_Wire):
    source: str = ""
    destination: str = ""


CreateJSON = Annotated[CreateBody, Depends(json_body(CreateBody))]
CopyJSON = Annotated[CopyBody, Depends(json_body(CopyBody))]


@router.post("/create", response_model=None)
async def create(request: Request, body: CreateJSON) -> StreamingResponse | JSONResponse:
    client = _client(request)
    events = client.create(body.target(), body.spec(client.store))
    return await progress_answer(events, stream=body.stream)


@router.post("/copy")
async def copy(request: Request, body: CopyJSON) -> Response:
    if not body.source or not body.destination:
        raise InvalidRequest(
            "source and destination are required", param="source" if not body.source else "destination"
        )
    await _client(request).copy(body.source, body.destination)
    return Response(status_code=200)


@router.head("/blobs/{digest}")
async def has_blob(request: Request, digest: str) -> Response:
    path = _client(request).store.blob_path(_hex(digest))
    return Response(status_code=200 if path.is_file() else 404)


@router.post("/blobs/{digest}")
async def upload_blob(request: Request, digest: str) -> Response:
    store = _client(request).store
    expected = _hex(digest)
    target = store.blob_path(expected)
    if target.is_file():
        return Response(status_code=200)
    with store.partial_file() as partial:
        sha = hashlib.sha256()
        with partial.open("wb") as out:
            async for chunk in request.stream():
                out.write(chunk)
                sha.update(chunk)
        if sha.hexdigest() != expected:
            raise InvalidRequest(f"digest mismatch: the body's sha256 is {sha.hexdigest()}", param="digest")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, target)
    return Response(status_code=201)


def _hex(digest: str) -> str:
    found = _DIGEST.fullmatch(digest)
    if found is None:
        raise InvalidRequest(f"{digest!r} is not a sha256 digest (sha256:<64 hex digits>)", param="digest")
    return found.group(1)


def _blobs(store: ModelStore, files: dict[str, str], field: str) -> tuple[Path, ...]:
    """The uploaded blobs ``files`` names (file name -> digest), in order. Raises InvalidRequest for one not here."""
    paths = []
    for name, digest in files.items():
        path = store.blob_path(_hex(digest))
        if not path.is_file():
            raise InvalidRequest(f"{field}: {name}'s blob {digest} is not here; upload it to /api/blobs/{digest} first")
        paths.append(path)
    return tuple(paths)
