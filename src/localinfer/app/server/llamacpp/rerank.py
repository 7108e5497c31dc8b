"""llama-server's reranking routes: ``POST /v1/rerank``, ``/rerank``, ``/v1/reranking`` and ``/reranking``, as
llama-server answers them (tools/server/server-context.cpp, ``post_rerank``) for RAG pipelines (Open WebUI,
LangChain, LlamaIndex) that score retrieved chunks against a question.

- Jina's and Cohere's shape: ``{"model", "query", "documents": [str], "top_n"}`` answers ``{"model", "object":
  "list", "usage": {"prompt_tokens", "total_tokens"}, "results": [{"index", "relevance_score"}]}``, most relevant
  first, cut to ``top_n``; ``index`` is the document's place in ``documents``. With ``return_documents`` (Jina's
  and Cohere's name) or ``return_text`` each result also has ``"document": {"text"}`` (llama-server sends no
  document in this shape).
- Hugging Face TEI's shape, chosen as llama-server chooses it, by a body with ``texts`` instead of ``documents``:
  a bare list ``[{"index", "score"}]`` in the same order, with ``"text"`` when ``return_text``.

The model must be a reranker (its GGUF states rank pooling); any other is a 400 that says so. Each query and
document pair is laid out as llama-server lays it out and scored alone (``backends/llamacpp/rerank.py``), so a
pair's score does not depend on the other documents. Errors come in llama-server's shape (``core/dialect.py``).
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute
from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest

router = APIRouter(route_class=FastJSONRoute)

PATHS = ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking")  # llama-server's four names for it


class RerankBody(BaseModel):
    """The request body; unknown fields are ignored, as llama-server ignores them. ``query`` and the documents
    are checked by ``query_text`` and ``document_texts``, whose 400s say what llama-server's say."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    query: Any = None
    documents: Any = None
    texts: Any = None  # TEI's name for the documents: the answer then takes TEI's shape
    top_n: StrictInt | None = Field(None, ge=0)
    return_documents: StrictBool = False
    return_text: StrictBool = False

    @property
    def tei(self) -> bool:
        return "texts" in self.model_fields_set

    def query_text(self) -> str:
        if "query" not in self.model_fields_set:
            raise InvalidRequest('"query" must be provided', param="query")
        if not isinstance(self.query, str):
            raise InvalidRequest('"query" must be a string', param="query")
        return self.query

    def document_texts(self) -> list[str]:
        given = self.documents if self.documents is not None else self.texts
        if not isinstance(given, list) or not given or not all(isinstance(text, str) for text in given):
            raise InvalidRequest('"documents" must be a non-empty string array', param="documents")
        return given


async def rerank(body: RerankBody, request: Request) -> Response:
    engine: Engine = request.app.state.engine
    model = requested_model(request, body.model)
    query, documents = body.query_text(), body.document_texts()
    result = await unless_disconnected(request, engine.rerank(model, query, documents))
    ranked = sorted(range(len(documents)), key=lambda index: -result.scores[index])[: body.top_n]
    with_text = body.return_text or body.return_documents
    answer: Any
    if body.tei:
        answer = [
            {"index": i, "score": result.scores[i], **({"text": documents[i]} if with_text else {})} for i in ranked
        ]
    else:
        answer = {
            "model": model,
            "object": "list",
            "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
            "results": [
                {
                    "index": i,
                    "relevance_score": result.scores[i],
                    **({"document": {"text": documents[i]}} if with_text else {}),
                }
                for i in ranked
            ],
        }
    return Response(pydantic_core.to_json(answer), media_type="application/json")


for _path in PATHS:
    router.add_api_route(_path, rerank, methods=["POST"], response_model=None, include_in_schema=_path == PATHS[0])
