"""llama-server's ``POST /infill``, as llama.vscode and llama.vim send it: fill-in-the-middle completion.

The body names the text around the cursor (``input_prefix``, ``input_suffix``), other files' chunks
(``input_extra``) and what was typed on the cursor's line (``prompt``); the engine lays the prompt out with the
model's own FIM tokens (``engine/infill.py``). The answer is llama-server's completion body (``responses.py``),
or only the keys ``response_fields`` names, flat (``"timings/prompt_n"``), as llama-server answers llama.vim.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from localinfer.app.server.core.app_state import SSE_HEADERS
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.streams import collect, primed
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.llamacpp.responses import Served, final_body, sse_stream
from localinfer.app.server.llamacpp.wire import CompletionBody, with_token_ids
from localinfer.engine.engine import Engine
from localinfer.types import GenerationOptions, InfillRequest

router = APIRouter(route_class=FastJSONRoute)  # the access guard (guard.py) checks the key before the body is read
INFILL_SAMPLER = "infill"


class ExtraChunk(BaseModel):
    """One chunk of another file: llama.vim sends a ``time`` too, which llama-server ignores, as we do."""

    model_config = ConfigDict(extra="ignore")

    text: str
    filename: str = "tmp"  # llama-server's name for a chunk that gives none


class InfillBody(CompletionBody):
    """``POST /infill``: ``/completion``'s fields with llama-server's defaults, and the FIM ones."""

    input_prefix: str
    input_suffix: str
    input_extra: list[ExtraChunk] = Field(default_factory=list)
    prompt: str = ""  # typed on the cursor's line: it continues the prefix
    n_indent: int = Field(0, ge=0)
    t_max_predict_ms: float = Field(0.0, ge=0.0)
    t_max_prompt_ms: float = 0.0  # llama-server takes it and ignores it (not supported yet, its source says)

    def to_core(self, model: str) -> InfillRequest:
        """The engine's request. Raises InvalidRequest naming a field we cannot honour."""
        samplers = self.samplers if isinstance(self.samplers, list) else None
        plain = self.model_copy(update={"samplers": [s for s in samplers if s != INFILL_SAMPLER]}) if samplers else self
        options = CompletionBody.options(plain)
        if samplers is not None and INFILL_SAMPLER in samplers:
            options = dataclasses.replace(options, sampling=dataclasses.replace(options.sampling, infill=True))
        options = dataclasses.replace(options, n_indent=self.n_indent, t_max_predict_ms=self.t_max_predict_ms)
        return InfillRequest(
            model=model,
            prefix=self.input_prefix,
            suffix=self.input_suffix,
            extra=tuple((chunk.filename, chunk.text) for chunk in self.input_extra),
            prompt=self.prompt,
            options=options,
            priority=self.priority or "high",
        )

    def infill_settings(self, options: GenerationOptions, n_ctx: int, eog_ids: tuple[int, ...] = ()) -> dict[str, Any]:
        """llama-server's ``generation_settings`` for this request."""
        settings = self.settings(options, n_ctx, eog_ids)
        if options.sampling.infill:
            settings["samplers"] = [*settings["samplers"][:-1], INFILL_SAMPLER, settings["samplers"][-1]]
        return {**settings, "n_indent": self.n_indent, "t_max_predict_ms": self.t_max_predict_ms}


@router.post("/infill", response_model=None)
async def infill(body: InfillBody, request: Request) -> JSONResponse | StreamingResponse:
    engine: Engine = request.app.state.engine
    model = requested_model(request, body.model)
    core = body.to_core(model)
    tokenize = functools.partial(engine.tokenize, model, add_special=False, parse_special=False)
    core = dataclasses.replace(core, options=await with_token_ids(core.options, tokenize))
    facts = await engine.facts(model)
    stream = await unless_disconnected(request, primed(engine.infill(core)))
    settings = body.infill_settings(core.options, facts.n_ctx, facts.eog_ids)
    served = Served(model=model, prompt=body.prompt, settings=settings, fields=tuple(body.response_fields or ()))
    if body.stream:
        return StreamingResponse(sse_stream([stream], [served]), media_type="text/event-stream", headers=SSE_HEADERS)
    result = await unless_disconnected(request, collect(stream))
    ids = result.tokens if body.return_tokens else ()
    return JSONResponse(final_body(served, result.text, result.last, stream=False, tokens=ids, probs=result.logprobs))
