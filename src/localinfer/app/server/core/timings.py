"""What every dialect's ``timings`` adds beyond the prompt and generation figures."""

from __future__ import annotations

from typing import Any

from localinfer.types import PromptProgress, Timings


def timings_fields(t: Timings, cache_n: int) -> dict[str, Any]:
    """llama-server's ``timings``: ``cache_n`` prompt tokens reused, ``prompt_n`` computed, then generation, whose
    per-token time and rate count the steps after the first token (as ``Timings.predicted_per_second`` does); on
    its own routes and the OpenAI ones alike."""
    return {
        "cache_n": cache_n,
        "prompt_n": t.prompt_n,
        "prompt_ms": round(t.prompt_ms, 3),
        "prompt_per_token_ms": round(t.prompt_ms / t.prompt_n, 3) if t.prompt_n else 0.0,
        "prompt_per_second": round(t.prompt_per_second, 2),
        "predicted_n": t.predicted_n,
        "predicted_ms": round(t.predicted_ms, 3),
        "predicted_per_token_ms": round(t.predicted_ms / (t.predicted_n - 1), 3) if t.predicted_n > 1 else 0.0,
        "predicted_per_second": round(t.predicted_per_second, 2),
        **speculation_body(t),
    }


def speculation_body(t: Timings) -> dict[str, int | float]:
    """llama-server's ``draft_n`` and ``draft_n_accepted`` when the reply was speculated (it sends them only
    then), ``cache_shared_n`` when part of the prompt was copied from another slot's cache, and ``cache_shifted_n``
    when part of it was moved to new positions rather than computed, and ``media_n`` and ``encode_ms`` when
    pictures or sounds were decoded: their embeddings, and the projector's time encoding them (all ours)."""
    body: dict[str, int | float] = {}
    if t.draft_n:
        body.update(draft_n=t.draft_n, draft_n_accepted=t.draft_n_accepted)
    if t.cache_shared_n:
        body["cache_shared_n"] = t.cache_shared_n
    if t.cache_shifted_n:
        body["cache_shifted_n"] = t.cache_shifted_n
    if t.media_n:
        body.update(media_n=t.media_n, encode_ms=t.encode_ms)
    return body


def progress_timings(progress: PromptProgress) -> Timings:
    """The timings so far of a prompt being computed, as llama-server sends them with its ``prompt_progress``: the
    tokens reused, those computed and the time taken; nothing generated yet."""
    return Timings(float(progress.time_ms), 0.0, max(progress.processed - progress.cache, 0), 0, cache_n=progress.cache)
