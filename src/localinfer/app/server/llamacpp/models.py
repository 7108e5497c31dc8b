"""llama-server's router-mode model control, so its clients (and ``localinfer stop``) load and unload models:

- ``POST /models/load {"model"}``: load the model now (a name the server lists, never a path) with its usual
  keep-alive; ``{"success": true}`` once it is loaded.
- ``POST /models/unload {"model"}``: unload it once its requests in flight have ended, at once when there are
  none; ``{"success": false}`` when it is not loaded.

Errors in llama-server's shape: an unknown model is a 404, a model that cannot be loaded a 500 with why.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import Field

from localinfer.app.server.core.app_state import engine_of
from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.core.wire import ClientBody
from localinfer.app.server.disconnect import unless_disconnected
from localinfer.app.server.limits import FastJSONRoute

router = APIRouter(prefix="/models", route_class=FastJSONRoute)


class ModelBody(ClientBody):
    model: str = Field(min_length=1, max_length=1024)


@router.post("/load")
async def load(request: Request, body: ModelBody) -> dict[str, bool]:
    model = requested_model(request, body.model, managing=True)
    await unless_disconnected(request, engine_of(request).runner(model))
    return {"success": True}


@router.post("/unload")
async def unload(request: Request, body: ModelBody) -> dict[str, bool]:
    model = requested_model(request, body.model, managing=True)
    return {"success": engine_of(request).unload_when_idle(model)}
