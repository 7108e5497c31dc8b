"""KV cache reuse by shifting: the runs of a slot's cache that come again, further on, in a new prompt are moved to
their new positions (their keys rotated there) instead of being computed again (llama-server's ``--cache-reuse``).

llama-server finds a run only where the new prompt goes on from what is kept: tokens removed from the middle of a
prompt (a chat whose oldest turns were trimmed) are skipped, tokens *inserted* are not, so a character typed in an
editor still recomputes everything after the cursor. Here a run may also come after new tokens. llama.cpp computes a
sequence's tokens only after the last position it holds, so a run that must wait for new tokens before it waits in a
scratch sequence of the same KV buffer (a unified cache: moving cells between sequences there copies nothing) and is
put back once the tokens before it are computed; a cache of one stream per slot can only move runs back, as
llama-server does. Keys shifted by RoPE are not bit for bit those computed at the new position, and a moved run
attended to what came before it in the old prompt: the reply can differ from computing the new prompt whole, as
llama-server's does (docs/benchmarks.md measures how often).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp.llama_cpp as lc

KEY = 8  # tokens a run is first matched on (any run is at least this long)


@dataclass(frozen=True)
class Run:
    """``length`` cached tokens at ``source`` that the new prompt has again at ``target``."""

    source: int
    target: int
    length: int

    @property
    def shift(self) -> int:
        return self.target - self.source


def reuse_plan(cached: Sequence[int], prompt: Sequence[int], start: int, min_run: int, *, inserts: bool) -> list[Run]:
    """The runs of at least ``min_run`` tokens of ``cached`` (past its first ``start``, which the prompt shares)
    that ``prompt`` has again, in order, after ``start``: each where the prompt goes on from the run before it
    (``inserts`` False: llama-server's rule), or anywhere further on (True). The prompt's last token is never in a
    run: it is computed, for the logits the reply starts from."""
    end = len(prompt) - 1
    runs: list[Run] = []
    if min_run <= 0 or start >= end:
        return runs
    key = min(KEY, min_run)
    where: dict[tuple[int, ...], list[int]] = {}
    if inserts:
        for p in range(start, end - key + 1):
            where.setdefault(tuple(prompt[p : p + key]), []).append(p)
    head_c, head_p = start, start
    while head_c + min_run <= len(cached) and head_p + min_run <= end:
        if inserts:
            candidates = [p for p in where.get(tuple(cached[head_c : head_c + key]), ()) if p >= head_p]
        else:
            candidates = [head_p]
        found = None
        for p in candidates:
            n = _matching(cached, head_c, prompt, p, end)
            if n >= min_run:
                found = Run(head_c, p, n)
                break
        if found is None:
            head_c += 1
            continue
        runs.append(found)
        head_c, head_p = found.source + found.length, found.target + found.length
    return runs


def _matching(cached: Sequence[int], c: int, prompt: Sequence[int], p: int, end: int) -> int:
    """How many tokens of ``cached`` from ``c`` equal those of ``prompt`` from ``p`` (before ``end``)."""
    n = 0
    while c + n < len(cached) and p + n < end and cached[c + n] == prompt[p + n]:
        n += 1
    return n


def can_shift(memory: lc.llama_memory_t, n_swa: int) -> str | None:
    """Why a context's cache cannot be reused by shifting (None: it can): llama.cpp says whether its memory can
    shift (recurrent and M-RoPE caches cannot); a sliding-window cache holds only the window, not the runs."""
    if n_swa:
        return "its attention has a sliding window, whose cache holds only the window"
    if not lc.llama_memory_can_shift(memory):
        return "llama.cpp cannot shift its memory (a recurrent or M-RoPE model)"
    return None
