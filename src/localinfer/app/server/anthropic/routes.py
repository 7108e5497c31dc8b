"""Anthropic's Messages routes, as llama-server serves them: ``POST /v1/messages`` (streamed or not) and
``POST /v1/messages/count_tokens``. Errors come back in Anthropic's shape (``core/dialect.py`` routes these paths
to it); a request that names no model goes to the default one (``core/model_name.py``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from localinfer.app.server.anthropic.responses import Reply, sse_events
from localinfer.app.server.anthropic.wire import CountTokensBody, MessagesBody
from localinfer.app.server.core.app_state import SSE_HEADERS, engine_of
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.prompt import prompt_tokens
from localinfer.app.server.core.streams import collect, primed
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute

router = APIRouter(prefix="/v1", route_class=FastJSONRoute)


@router.post("/messages", response_model=None)
async def messages(body: MessagesBody, request: Request) -> JSONResponse | StreamingResponse:
    body.model = requested_model(request, body.model)  # none named: the server's default model
    core = body.to_core()
    stream = await unless_disconnected(request, primed(engine_of(request).chat(core)))
    reply = Reply.new(body.model, body.stops, body.single_call, body.shows_thinking)
    if body.stream:
        return StreamingResponse(sse_events(stream, reply), media_type="text/event-stream", headers=SSE_HEADERS)
    result = await unless_disconnected(request, collect(stream))
    return JSONResponse(reply.message(result))


@router.post("/messages/count_tokens")
async def count_tokens(body: CountTokensBody, request: Request) -> dict[str, int]:
    """``{"input_tokens": n}``: the tokens of the prompt ``/v1/messages`` would give the model for the same turns,
    system text and tools (rendered by its chat template), as llama-server counts them."""
    body.model = requested_model(request, body.model)
    core = body.to_core()
    return {"input_tokens": await prompt_tokens(engine_of(request), core)}
