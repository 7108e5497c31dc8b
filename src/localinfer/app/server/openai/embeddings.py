"""``POST /v1/embeddings``, as OpenAI answers it: codebase indexing and RAG clients (Continue, Cline, LangChain...).

- ``input``: a string, a list of strings, a token array, or a list of token arrays; at most ``MAX_INPUTS`` of
  them, none empty, each within the model's context (a 400 otherwise: OpenAI refuses rather than truncates).
- ``encoding_format``: ``float`` (the default) or ``base64``, the vector's little-endian float32 bytes, which the
  official ``openai`` client asks for by default and decodes.
- ``dimensions``: only the model's own (OpenAI's newer models can shorten their vectors; these cannot): any other
  value is a 400 naming it.
- ``model``: a request naming none goes to the server's default model.

Vectors are pooled as the model's GGUF states (mean pooling for a generative model) and L2-normalised, as
OpenAI's are. ``usage.prompt_tokens`` counts the tokens embedded.
"""

from __future__ import annotations

import base64
import struct
from typing import Any, Literal

import pydantic_core
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from localinfer.app.server.core.embeddings import (
    GivenInput,
    check_pooled,
    embedding_inputs,
    native_embeddings,
    tokenized,
)
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute
from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest

router = APIRouter(prefix="/v1", route_class=FastJSONRoute)


class EmbeddingsBody(BaseModel):
    """The request body; unknown fields (``user``...) are accepted and ignored, as OpenAI-compatible servers do.
    ``content`` in place of ``input`` is llama-server's: the answer then takes its native shape
    (``llamacpp/embeddings.py``), as llama-server answers it."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: Any = None  # checked by ``inputs``, whose 400 says which shapes are taken
    content: Any = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = Field(None, ge=1)

    @property
    def native(self) -> bool:
        """Whether the inputs came as llama-server's ``content``, which it answers in its own shape."""
        return self.input is None and self.content is not None

    def inputs(self) -> list[GivenInput]:
        """The inputs, each a text or token ids. Raises InvalidRequest for another shape, none, or too many."""
        if self.input is None and self.content is None:
            raise InvalidRequest("input (or llama-server's content) is required", param="input")
        return embedding_inputs(self.content if self.native else self.input, "content" if self.native else "input")


@router.post("/embeddings", response_model=None)
async def embeddings(body: EmbeddingsBody, request: Request) -> Response:
    engine: Engine = request.app.state.engine
    model = requested_model(request, body.model)
    await check_pooled(engine, model)  # llama-server's OpenAI route refuses it, whatever shape is asked
    if body.native:
        return await native_embeddings(request, model, body.inputs(), normalize=True)
    inputs = await tokenized(engine, model, body.inputs())
    result = await unless_disconnected(request, engine.embed(model, inputs, normalize=True))
    n_dimensions = len(result.vectors[0])
    if body.dimensions is not None and body.dimensions != n_dimensions:
        raise InvalidRequest(
            f"dimensions is {body.dimensions}, but this model's vectors have {n_dimensions} and cannot be shortened",
            param="dimensions",
        )
    answer: dict[str, Any] = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": _encoded(vector, body.encoding_format)}
            for index, vector in enumerate(result.vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
    }
    return Response(pydantic_core.to_json(answer), media_type="application/json")


def _encoded(vector: tuple[float, ...], encoding: str) -> list[float] | str:
    """The vector as numbers, or as base64 of its little-endian float32 bytes (what OpenAI sends)."""
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return list(vector)
