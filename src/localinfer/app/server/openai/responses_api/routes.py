"""OpenAI's Responses API routes, as llama-server serves them: ``POST /v1/responses`` (streamed or not) and
``POST /v1/responses/input_tokens``, each also without ``/v1``. The body becomes a core chat request
(``wire.py``), the answer a ``response`` object or its event stream (``reply.py``). Errors come
back in OpenAI's shape (``core/dialect.py``); a request that names no model goes to the default one
(``core/model_name.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from localinfer.app.server.core.app_state import SSE_HEADERS, engine_of
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.prompt import prompt_tokens
from localinfer.app.server.core.streams import collect, primed
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.openai.responses_api.reply import Reply, sse_events
from localinfer.app.server.openai.responses_api.wire import ResponsesBody

router = APIRouter(route_class=FastJSONRoute)


@router.post("/v1/responses", response_model=None)
async def responses(body: ResponsesBody, request: Request) -> JSONResponse | StreamingResponse:
    body.model = requested_model(request, body.model)  # none named: the server's default model
    core = body.to_core()
    stream = await unless_disconnected(request, primed(engine_of(request).chat(core)))
    reply = Reply(body.model, body.echoed(), single_call=not body.parallel_tool_calls)
    if body.stream:
        events = sse_events(stream, reply, timings_per_token=body.timings_per_token)
        return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
    result = await unless_disconnected(request, collect(stream))
    return JSONResponse(reply.answer(result))


@router.post("/v1/responses/input_tokens")
async def input_tokens(body: ResponsesBody, request: Request) -> dict[str, Any]:
    """``{"object": "response.input_tokens", "input_tokens": n}``: the tokens of the prompt ``/v1/responses``
    would give the model for the same body (rendered by its chat template), as llama-server counts them."""
    body.model = requested_model(request, body.model)
    return {"object": "response.input_tokens", "input_tokens": await prompt_tokens(engine_of(request), body.to_core())}


# llama-server answers both without /v1 too.
router.add_api_route("/responses", responses, methods=["POST"], response_model=None, include_in_schema=False)
router.add_api_route("/responses/input_tokens", input_tokens, methods=["POST"], include_in_schema=False)
