"""A chat request's prompt, without generating, as llama-server answers it:

- ``POST /apply-template``: ``{"prompt"}``, the text a chat completion's turns and tools render to through the
  model's chat template (llama.cpp's route: clients that tokenise themselves, and anyone debugging a template);
- ``POST /v1/chat/completions/input_tokens`` (and without ``/v1``): ``{"object": "response.input_tokens",
  "input_tokens"}``, how many tokens that prompt is.

Both take the body ``/v1/chat/completions`` takes; the model is named, or the default one, as there.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from localinfer.app.server.core.app_state import engine_of
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.prompt import prompt_tokens
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.openai.wire import ChatCompletionBody

router = APIRouter(route_class=FastJSONRoute)


@router.post("/apply-template")
async def apply_template(body: ChatCompletionBody, request: Request) -> dict[str, str]:
    body.model = requested_model(request, body.model)
    rendered = await engine_of(request).render(body.to_core())
    return {"prompt": rendered.text}


@router.post("/v1/chat/completions/input_tokens")
async def input_tokens(body: ChatCompletionBody, request: Request) -> dict[str, Any]:
    body.model = requested_model(request, body.model)
    return {"object": "response.input_tokens", "input_tokens": await prompt_tokens(engine_of(request), body.to_core())}


router.add_api_route("/chat/completions/input_tokens", input_tokens, methods=["POST"], include_in_schema=False)
