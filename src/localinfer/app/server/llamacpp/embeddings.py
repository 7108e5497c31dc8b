"""llama-server's native embeddings: ``POST /embeddings`` (and the older ``/embedding``). The inputs come as
``content`` or ``input`` in any shape ``core/embeddings.py`` takes; the answer is ``[{"index", "embedding": [[...]]}]``.
``embd_normalize`` is llama-server's: 2 (the default) L2-normalises, -1 leaves the pooled vector as it is; the others
(max-absolute, p-norms) are refused with a 400 naming it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, StrictInt

from localinfer.app.server.core.embeddings import embedding_inputs, native_embeddings
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.limits import FastJSONRoute
from localinfer.errors import InvalidRequest

router = APIRouter(route_class=FastJSONRoute)


class NativeEmbeddingsBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: Any = None
    content: Any = None
    embd_normalize: StrictInt = 2


@router.post("/embeddings", response_model=None)
async def embeddings(body: NativeEmbeddingsBody, request: Request) -> Response:
    if body.input is None and body.content is None:
        raise InvalidRequest('"input" or "content" must be provided', param="content")
    if body.embd_normalize not in (-1, 2):
        raise InvalidRequest(
            "embd_normalize must be 2 (L2, the default) or -1 (none) on this server", param="embd_normalize"
        )
    param = "input" if body.input is not None else "content"
    inputs = embedding_inputs(body.input if body.input is not None else body.content, param)
    model = requested_model(request, body.model)
    return await native_embeddings(request, model, inputs, normalize=body.embd_normalize == 2)


router.add_api_route("/embedding", embeddings, methods=["POST"], response_model=None, include_in_schema=False)
