"""llama-server's ``POST /slots/{id_slot}?action=save|restore|erase``: a slot's cache saved to a file in the
``--slot-save-path`` folder and restored from it later (a long document or system prompt computed once, reused
across restarts), or erased. The model is named by ``?model=``, else the default one.

Checked in llama-server's order: no slot folder is a 501; a slot id that is not a number, an unknown action, a body
without a plain ``filename`` are 400s. A slot id past the last slot wraps around (slot 5 of 2 is slot 1), as
llama-server's does. Stricter than llama-server: a negative slot id (which it wraps or refuses depending on the
slot count) or one with trailing characters (``1x``, which it reads as 1) is a 400, and so is a body that is not
JSON or has no ``filename`` (a 500 there): the fault is the request's.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request

from localinfer.app.server.core.model_name import requested_model
from localinfer.app.server.limits import FastJSONRoute
from localinfer.backends.base import SlotFile
from localinfer.engine.engine import Engine
from localinfer.errors import InvalidRequest

router = APIRouter(route_class=FastJSONRoute)


@router.post("/slots/{id_slot}")
async def slot_action(request: Request, id_slot: str, action: str = "", model: str | None = None) -> dict[str, Any]:
    """Save, restore or erase slot ``id_slot``'s cache, once the slot holds no request (a busy slot's action
    waits for it, as llama-server defers it)."""
    engine: Engine = request.app.state.engine
    engine.slot_folder()  # a 501 first, whatever else the request says
    slot = _slot_id(id_slot)
    if action == "erase":
        n_erased = await engine.erase_slot(requested_model(request, model), slot)
        return {"id_slot": slot, "n_erased": n_erased}
    if action == "save":
        filename = await _filename(request)
        saved = await engine.save_slot(requested_model(request, model), slot, filename)
        return _file_answer(slot, saved, filename, "n_saved", "n_written", "save_ms")
    if action == "restore":
        filename = await _filename(request)
        restored = await engine.restore_slot(requested_model(request, model), slot, filename)
        return _file_answer(slot, restored, filename, "n_restored", "n_read", "restore_ms")
    raise InvalidRequest("Invalid action", param="action", hint="use ?action=save, restore or erase")


def _slot_id(given: str) -> int:
    if not given.isascii() or not given.isdigit():
        raise InvalidRequest("Invalid slot ID", param="id_slot", hint="a slot is named by its number: /slots/0")
    return int(given)


async def _filename(request: Request) -> str:
    """The body's ``filename``. Raises InvalidRequest when the body is not a JSON object with a string there."""
    try:
        body = json.loads(await request.body() or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidRequest("the request body is not valid JSON") from None
    filename = body.get("filename") if isinstance(body, dict) else None
    if not isinstance(filename, str):
        raise InvalidRequest("filename: a string is required", param="filename", hint='send {"filename": "NAME.bin"}')
    return filename


def _file_answer(slot: int, result: SlotFile, filename: str, n_tokens: str, n_bytes: str, ms: str) -> dict[str, Any]:
    """A save's or a restore's answer, with llama-server's field names (``id_slot`` as asked: a slot id past the
    last slot wraps around, and llama-server answers the one asked)."""
    return {
        "id_slot": slot,
        "filename": filename,
        n_tokens: result.n_tokens,
        n_bytes: result.n_bytes,
        "timings": {ms: result.ms},
    }
