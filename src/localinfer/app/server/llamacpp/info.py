"""What llama-server says about itself: /props (the model, its context and template), /slots (what each slot is
doing), /metrics (Prometheus text). A model is named by ``?model=``, else the default one; never by a path: a
client is told the model's name where llama-server puts its file's path.

For a reasoning model, /props says what llama-server says: ``chat_template_caps`` with its template's thinking
capabilities (llamacpp/template_caps.py; llama-server's other capabilities, about tools and content, are not
listed), and its default settings' ``chat_format``, ``reasoning_format``, ``reasoning_in_content`` and
``generation_prompt`` as a ``/completion`` is served (raw text: no thinking taken out), whatever the model."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from localinfer import __version__
from localinfer.app.server.core.app_state import engine_of
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.limits import FastJSONRoute
from localinfer.app.server.llamacpp.template_caps import reasoning_caps
from localinfer.app.server.llamacpp.wire import CompletionBody
from localinfer.backends.base import SlotInfo
from localinfer.errors import NotSupported, QueueFull
from localinfer.types import MEDIA_MARKER

router = APIRouter(route_class=FastJSONRoute)

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"  # the format generate_latest and llama-server write


def _default_params(n_ctx: int) -> dict[str, Any]:
    """What a /completion that sets nothing is served with."""
    defaults = CompletionBody(prompt="")
    raw_text = {"chat_format": "Content-only", "reasoning_format": "none", "reasoning_in_content": False}
    return {**defaults.settings(defaults.options(), n_ctx), **raw_text, "generation_prompt": ""}


def _slot(slot: SlotInfo) -> dict[str, Any]:
    """A slot as llama-server's /slots shows it; ``next_token`` is a list of one entry, as there."""
    next_token = {
        "has_next_token": slot.is_processing,
        "has_new_line": slot.has_new_line,
        "n_remain": slot.n_remain,
        "n_decoded": slot.n_decoded,
    }
    return {
        "id": slot.id,
        "n_ctx": slot.n_ctx,
        "speculative": False,
        "is_processing": slot.is_processing,
        "n_prompt_tokens": slot.n_prompt,
        "n_cached_tokens": slot.n_cached,
        "next_token": [next_token],
    }


@router.get("/props")
async def props(request: Request, model: str | None = None) -> dict[str, Any]:
    name = requested_model(request, model)
    engine = engine_of(request)
    facts = await engine.facts(name)
    idle = SlotInfo(id=0, n_ctx=facts.n_ctx, is_processing=False)
    return {
        "default_generation_settings": {**_slot(idle), "params": _default_params(facts.n_ctx)},
        "total_slots": facts.n_slots,
        "model_alias": name,
        "model_path": name,
        "modalities": {  # video: llama-server's build reads video through ffmpeg; localinfer takes none
            "vision": "vision" in facts.modalities,
            "audio": "audio" in facts.modalities,
            "video": False,
        },
        "media_marker": MEDIA_MARKER,  # what /completion's prompt_string holds for each of its multimodal_data
        "chat_template": facts.chat_template or "",
        "chat_template_caps": await reasoning_caps(engine, name, facts),
        "bos_token": facts.bos_token,
        "eos_token": facts.eos_token,
        "build_info": f"localinfer {__version__}",
    }


@router.get("/slots")
async def slots(request: Request, model: str | None = None, fail_on_no_slot: bool = False) -> list[dict[str, Any]]:
    """Each slot of the model; with ``fail_on_no_slot``, a 503 when none is idle (as llama-server answers)."""
    if not getattr(request.app.state, "slots_endpoint", True):
        raise NotSupported("this server was started with --no-slots", hint="start it without --no-slots")
    engine = engine_of(request)
    name = requested_model(request, model)
    await engine.facts(name)  # loaded, as llama-server's model always is
    infos = engine.slots(name)
    if fail_on_no_slot and infos and all(slot.is_processing for slot in infos):
        raise QueueFull("no slot available", hint="retry shortly")
    return [_slot(slot) for slot in infos]


@router.get("/metrics")
async def metrics(request: Request, model: str | None = None) -> Response:
    """Every model's counters, histograms and gauges, in Prometheus' text format, then llama-server's
    ``llamacpp:*`` series over every model, or ``?model=``'s alone as llama-server's router mode answers (the model
    is not loaded for it; a name nobody serves is a 404, or on a server of one model that model's, as every route
    of a server of one model answers). ``Process-Start-Time-Unix`` says when the server began,
    in Unix seconds as its name says (llama-server sends its monotonic clock's microseconds there), so a scraper can
    tell a restart from a counter that stalled."""
    engine = engine_of(request)
    name = None
    if model is not None and model.strip():
        name = requested_model(request, model)
        engine.describe(name)  # ModelNotFound for a name nobody serves
    return Response(
        engine.metrics.render(name),
        media_type=PROMETHEUS_TEXT,
        headers={"Process-Start-Time-Unix": str(int(engine.metrics.started))},
    )
