"""llama-server's ``GET /lora-adapters`` (the adapters loaded with the model: id, path, scale) and ``POST
/lora-adapters`` (their global scales: ``[{"id": 0, "scale": 0.5}]``, adapters left out at 0), which serve the
requests that name no adapters of their own from their next step on. The model is named by ``?model=``, else the
default one. Stricter than llama-server: an unknown id, or an entry without an ``id``, is a 400 (it ignores
them); a model loaded without adapters answers ``[]`` as llama-server does."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from pydantic import TypeAdapter, ValidationError

from localinfer.app.server.core.app_state import engine_of
from localinfer.app.server.core.lora import LoraWire
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.limits import FastJSONRoute
from localinfer.errors import InvalidRequest

router = APIRouter(route_class=FastJSONRoute)

_ENTRIES = TypeAdapter(list[LoraWire])


@router.get("/lora-adapters")
async def lora_adapters(request: Request, model: str | None = None) -> list[dict[str, Any]]:
    engine = engine_of(request)
    adapters = await engine.lora_adapters(requested_model(request, model))
    return [{"id": a.id, "path": str(a.path), "scale": a.scale, "task_name": "", "prompt_prefix": ""} for a in adapters]


@router.post("/lora-adapters")
async def set_lora_adapters(request: Request, model: str | None = None) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidRequest("the request body is not valid JSON") from None
    if not isinstance(body, list):
        raise InvalidRequest("Request body must be an array", hint='send [{"id": 0, "scale": 0.5}]')
    try:
        entries = _ENTRIES.validate_python(body)
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"])
        raise InvalidRequest(
            f"[{where}]: {exc.errors()[0]['msg']}", hint='each entry is {"id": N, "scale": X}'
        ) from None
    await engine_of(request).set_lora_scales(requested_model(request, model), {e.id: e.scale for e in entries})
    return {"success": True}
