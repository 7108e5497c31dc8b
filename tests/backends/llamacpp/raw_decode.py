"""A decode straight through llama.cpp, outside the step loop: for tests that compare logits llama.cpp computes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_cpp.llama_cpp as lc


def decode_with_logits(ctx: lc.llama_context_p, batch: Any, tokens: Sequence[int], start: int = 0) -> None:
    """Decode ``tokens`` of sequence 0 at positions ``start`` on, with logits at every one. ``batch`` is what
    llama_batch_init made for that many tokens at least (untyped, as llama_batch_init returns it: its stubs type the
    arrays' items as ctypes values, where ctypes takes ints)."""
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = start + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = True
    batch.n_tokens = len(tokens)
    assert lc.llama_decode(ctx, batch) == 0


def decode_prompt(ctx: lc.llama_context_p, tokens: Sequence[int]) -> None:
    """Decode ``tokens`` as sequence 0's prompt from position 0, with logits at the last only, as the step loop asks
    for a prompt's: a context loaded as the server loads it holds logits for its slots' tokens and drafts, not for
    every token of a batch (step_limits.py)."""
    array = (lc.llama_token * len(tokens))(*tokens)
    assert lc.llama_decode(ctx, lc.llama_batch_get_one(array, len(tokens))) == 0
