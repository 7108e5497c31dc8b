"""llama.cpp's native generation routes, as llama-server answers them: /completion (and /completions), /tokenize,
/detokenize; its reranking in ``rerank.py``. A request that names no model goes to the default one
(``core/model_name.py``); errors come back in llama-server's shape (``core/dialect.py`` routes these paths to it)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from localinfer.app.server.core.app_state import SSE_HEADERS, engine_of
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.streams import collect, primed
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.llamacpp.info import router as info_router
from localinfer.app.server.llamacpp.rerank import router as rerank_router
from localinfer.app.server.llamacpp.responses import Served, final_body, sse_stream
from localinfer.app.server.llamacpp.wire import (
    CompletionBody,
    DetokenizeBody,
    Prompt,
    TokenizeBody,
    plain_prompt,
    with_token_ids,
)
from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest
from localinfer.types import CompletionRequest

router = APIRouter(route_class=FastJSONRoute)
router.include_router(info_router)
router.include_router(rerank_router)


@router.post("/completion", response_model=None)
async def completion(body: CompletionBody, request: Request) -> JSONResponse | StreamingResponse:
    engine = engine_of(request)
    model = requested_model(request, body.model)
    options = await with_token_ids(body.options(), _text_tokenizer(engine, model))
    facts = await engine.facts(model)
    prompt = plain_prompt(body.prompt)
    text = prompt if isinstance(prompt, str) else ""
    tokens: tuple[int, ...] = ()
    if not isinstance(prompt, str):
        tokens = tuple(await _tokens(engine, model, prompt, add_special=True, parse_special=True))
        text = await _text(engine, model, tokens)  # refuses an id outside the vocabulary
    fields = tuple(body.response_fields or ())
    served = Served(model, text, body.settings(options, facts.n_ctx, facts.eog_ids), fields)
    core = CompletionRequest(
        model=model, prompt=text, options=options, tokens=tokens, priority=body.priority or "normal"
    )
    stream = await unless_disconnected(request, primed(engine.complete(core)))
    if body.stream:
        return StreamingResponse(sse_stream(stream, served), media_type="text/event-stream", headers=SSE_HEADERS)
    result = await unless_disconnected(request, collect(stream))
    ids = result.tokens if body.return_tokens else ()
    return JSONResponse(final_body(served, result.text, result.last, stream=False, tokens=ids, probs=result.logprobs))


# llama-server's other name for it (not /v1/completions, which is OpenAI's)
router.add_api_route("/completions", completion, methods=["POST"], response_model=None, include_in_schema=False)


@router.post("/tokenize")
async def tokenize(body: TokenizeBody, request: Request) -> dict[str, Any]:
    """``{"tokens": [ids]}``, or with ``with_pieces`` ``[{"id", "piece"}]``: a piece is its text, or its bytes
    as a list of numbers when they are not whole UTF-8 characters (as llama-server answers)."""
    engine = engine_of(request)
    model = requested_model(request, body.model)
    tokens = await _tokens(engine, model, body.content, add_special=body.add_special, parse_special=body.parse_special)
    pieces = await engine.detokenize(model, tokens)  # also refuses an id outside the vocabulary
    if not body.with_pieces:
        return {"tokens": tokens}
    return {"tokens": [{"id": p.id, "piece": _piece(p.piece)} for p in pieces]}


@router.post("/detokenize")
async def detokenize(body: DetokenizeBody, request: Request) -> dict[str, Any]:
    engine = engine_of(request)
    model = requested_model(request, body.model)
    return {"content": await _text(engine, model, body.tokens)}


async def _tokens(engine: Engine, model: str, prompt: Prompt, *, add_special: bool, parse_special: bool) -> list[int]:
    """``prompt`` as token ids: text tokenized, ids as they are, both mixed as llama-server mixes them (only a text
    that comes first gets the model's BOS). A list of texts alone is several prompts, which we refuse."""
    if isinstance(prompt, str):
        return await engine.tokenize(model, prompt, add_special=add_special, parse_special=parse_special)
    if len(prompt) > 1 and all(isinstance(part, str) for part in prompt):
        raise InvalidRequest("several prompts in one request are not supported: send one", param="prompt")
    tokens: list[int] = []
    for i, part in enumerate(prompt):
        if isinstance(part, int):
            tokens.append(part)
        else:
            first = add_special and i == 0
            tokens.extend(await engine.tokenize(model, part, add_special=first, parse_special=parse_special))
    return tokens


def _text_tokenizer(engine: Engine, model: str) -> Callable[[str], Awaitable[list[int]]]:
    """The model's tokenizer for a logit bias's text: no BOS, control tokens' text read as text (llama-server's)."""
    return functools.partial(engine.tokenize, model, add_special=False, parse_special=False)


async def _text(engine: Engine, model: str, tokens: list[int] | tuple[int, ...]) -> str:
    pieces = await engine.detokenize(model, tokens)
    return b"".join(p.piece for p in pieces).decode("utf-8", errors="replace")


def _piece(data: bytes) -> str | list[int]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)
