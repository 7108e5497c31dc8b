"""What every dialect's ``timings`` adds beyond the prompt and generation figures."""

from __future__ import annotations

from localinfer.types import PromptProgress, Timings


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
