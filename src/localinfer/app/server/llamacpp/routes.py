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
from localinfer.app.server.core.choices import choice_streams, collect_all
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.streams import primed
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
    plain_prompts,
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
    """One completion, or several: of each prompt of a list, ``n_cmpl`` each (core/choices.py: a prompt computed
    once, its completions decoded side by side). Several come back as a list (streamed: events naming their
    ``index``), as llama-server answers them."""
    engine = engine_of(request)
    model = requested_model(request, body.model)
    options = await with_token_ids(body.options(), _text_tokenizer(engine, model))
    facts = await engine.facts(model)
    prompts = plain_prompts(body.prompt)
    n = body.choices(len(prompts))
    settings = body.settings(options, facts.n_ctx, facts.eog_ids)
    fields = tuple(body.response_fields or ())
    cores: list[CompletionRequest] = []
    served: list[Served] = []
    for prompt, media in prompts:
        text, tokens = await _prompt_text(engine, model, prompt)
        core = CompletionRequest(
            model=model, prompt=text, options=options, tokens=tokens, priority=body.priority or "normal", media=media
        )
        cores.append(core)
        served.extend([Served(model, text, settings, fields)] * n)
    streams = choice_streams(cores, n, engine.complete)
    streams[0] = await unless_disconnected(request, primed(streams[0]))
    if body.stream:
        return StreamingResponse(sse_stream(streams, served), media_type="text/event-stream", headers=SSE_HEADERS)
    results = await unless_disconnected(request, collect_all(streams))
    answers = [
        final_body(
            s,
            r.text,
            r.last,
            stream=False,
            tokens=r.tokens if body.return_tokens else (),
            probs=r.logprobs,
            index=index,
        )
        for index, (s, r) in enumerate(zip(served, results, strict=True))
    ]
    return JSONResponse(answers[0] if len(answers) == 1 else answers)


async def _prompt_text(engine: Engine, model: str, prompt: Prompt) -> tuple[str, tuple[int, ...]]:
    """``prompt`` as the text it reads as and, where it holds token ids, its tokens (ids outside the vocabulary
    refused); a text alone is tokenized by the backend."""
    if isinstance(prompt, str):
        return prompt, ()
    tokens = tuple(await _tokens(engine, model, prompt, add_special=True, parse_special=True))
    return await _text(engine, model, tokens), tokens


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
