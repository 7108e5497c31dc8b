"""llama-server's ``lora`` field, on ``/completion``, ``/infill``, ``/v1/completions`` and ``/v1/chat/completions``:
the LoRA adapters a request is served with, as ``[{"id": 0, "scale": 0.5}]`` (ids from ``GET /lora-adapters``).
Adapters a request leaves out are at scale 0 for it; a request without the field (or with an empty list, as
llama-server reads it) is served with the global scales. Stricter than llama-server, which ignores them: an id no
adapter has is a 400 (the backend checks it), and so is an entry without an ``id``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, StrictInt


class LoraWire(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: StrictInt
    scale: float = 0.0  # llama-server's default for an entry without one


def lora_pairs(given: list[LoraWire] | None) -> tuple[tuple[int, float], ...] | None:
    """``given`` as the core's (id, scale) pairs; None (the global scales) when absent or empty."""
    if not given:
        return None
    return tuple((entry.id, entry.scale) for entry in given)
