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
