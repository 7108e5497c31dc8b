"""Ollama's embedding routes, in Ollama's shapes, for Open WebUI's and Continue's RAG and the ``ollama`` client.

- ``POST /api/embed {"model", "input", "truncate", "dimensions", "keep_alive", "options"}``: ``input`` a string
  or a list of strings (at most ``MAX_INPUTS``); answers ``{"model", "embeddings": [[...]], "total_duration",
  "load_duration", "prompt_eval_count"}`` (nanoseconds) with L2-normalised vectors, as Ollama gives them.
  ``truncate`` (default true) cuts an input past the context to it; false makes it a 400. ``dimensions`` keeps the
  first that many numbers of each vector and normalises them again, as Ollama does. No input (or ``""`` or
  ``[]``) only loads the model and answers no vectors, as Ollama does; an empty string among others is a 400.
- ``POST /api/embeddings {"model", "prompt", "keep_alive", "options"}`` (Ollama's legacy route): ``{"embedding":
  [...]}``, the pooled vector as the model gives it, not normalised, as Ollama's legacy route answers; an empty
  prompt only loads the model. A prompt past the context is cut to it.

``keep_alive`` is how long the model stays loaded after the request; ``options`` are accepted and ignored: sampling does
not change a vector. Vectors are pooled as the model's GGUF states (mean pooling for a generative model, as
llama-server's ``--pooling mean``). A request naming no model goes to the server's default one.
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Any

import pydantic_core
from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from localinfer.app.server.core.embeddings import check_pooled
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.wire import keep_alive_seconds
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.ollama.wire import json_body
from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest

router = APIRouter(prefix="/api", route_class=FastJSONRoute)

MAX_INPUTS = 2048  # as /v1/embeddings


class _EmbedWire(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    keep_alive: str | int | float | None = None  # how long the model stays loaded after this request
    options: dict[str, Any] | None = None  # accepted; nothing in them changes a vector


class EmbedBody(_EmbedWire):
    input: StrictStr | list[StrictStr] | None = None
    truncate: bool = True
    dimensions: int | None = Field(None, ge=0)

    def inputs(self) -> list[str]:
        """The texts to embed; none when the request only loads the model. Raises InvalidRequest for too many."""
        if isinstance(self.input, str):
            return [self.input] if self.input else []
        texts = list(self.input or [])
        if len(texts) > MAX_INPUTS:
            raise InvalidRequest(f"input holds {len(texts)} items; at most {MAX_INPUTS} are allowed", param="input")
        return texts


class EmbeddingsBody(_EmbedWire):
    prompt: StrictStr = ""


EmbedJSON = Annotated[EmbedBody, Depends(json_body(EmbedBody))]
EmbeddingsJSON = Annotated[EmbeddingsBody, Depends(json_body(EmbeddingsBody))]


def _json(answer: dict[str, Any]) -> Response:
    return Response(pydantic_core.to_json(answer), media_type="application/json")


@router.post("/embed", response_model=None)
async def embed(request: Request, body: EmbedJSON) -> Response:
    engine: Engine = request.app.state.engine
    model = requested_model(request, body.model)
    started = time.monotonic_ns()
    texts = body.inputs()
    keep_alive = keep_alive_seconds(body.keep_alive)
    await unless_disconnected(request, engine.runner(model, keep_alive=keep_alive))
    loaded = time.monotonic_ns()
    await check_pooled(engine, model)
    if not texts:
        return _json({"model": model, "embeddings": []})
    result = await unless_disconnected(
        request, engine.embed(model, texts, normalize=True, truncate=body.truncate, keep_alive=keep_alive)
    )
    vectors = [_shortened(vector, body.dimensions) for vector in result.vectors]
    return _json(
        {
            "model": model,
            "embeddings": vectors,
            "total_duration": time.monotonic_ns() - started,
            "load_duration": loaded - started,
            "prompt_eval_count": result.prompt_tokens,
        }
    )


@router.post("/embeddings", response_model=None)
async def embeddings(request: Request, body: EmbeddingsJSON) -> Response:
    engine: Engine = request.app.state.engine
    model = requested_model(request, body.model)
    keep_alive = keep_alive_seconds(body.keep_alive)
    if not body.prompt:
        await unless_disconnected(request, engine.runner(model, keep_alive=keep_alive))
        return _json({"embedding": []})
    await check_pooled(engine, model)
    result = await unless_disconnected(
        request, engine.embed(model, [body.prompt], normalize=False, truncate=True, keep_alive=keep_alive)
    )
    return _json({"embedding": list(result.vectors[0])})


def _shortened(vector: tuple[float, ...], dimensions: int | None) -> list[float]:
    """``vector``'s first ``dimensions`` numbers normalised again, as Ollama shortens a vector; all of it when
    ``dimensions`` is unset or not shorter."""
    if not dimensions or dimensions >= len(vector):
        return list(vector)
    head = vector[:dimensions]
    norm = max(math.sqrt(math.fsum(x * x for x in head)), 1e-12)
    return [x / norm for x in head]
