"""Checkpoints of a sequence's sliding-window cache, so prefix reuse works on SWA models (Gemma 3...).

A sliding-window cache keeps only the last window of positions, so it cannot be rolled back to an earlier
point of the prompt: without help, every new turn of a chat would recompute the whole history. After each
prompt is prefilled, the slot saves the window part of its state; a later request sharing that prefix
restores it and computes only what follows (what llama-server's context checkpoints do).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp.llama_cpp as lc

PARTIAL = lc.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


@dataclass(frozen=True)
class Checkpoint:
    n_tokens: int  # the sequence's first n_tokens were in the cache when it was taken
    pos_min: int
    pos_max: int
    data: ctypes.Array[ctypes.c_uint8]


def take(ctx: lc.llama_context_p, memory: lc.llama_memory_t, seq_id: int, n_tokens: int) -> Checkpoint | None:
    size = lc.llama_state_seq_get_size_ext(ctx, seq_id, PARTIAL)
    if size == 0:
        return None
    data = (ctypes.c_uint8 * size)()
    if lc.llama_state_seq_get_data_ext(ctx, data, size, seq_id, PARTIAL) != size:
        return None
    return Checkpoint(
        n_tokens,
        lc.llama_memory_seq_pos_min(memory, seq_id),
        lc.llama_memory_seq_pos_max(memory, seq_id),
        data,
    )


def restore(ctx: lc.llama_context_p, seq_id: int, checkpoint: Checkpoint) -> bool:
    size = len(checkpoint.data)
    return bool(lc.llama_state_seq_set_data_ext(ctx, checkpoint.data, size, seq_id, PARTIAL) == size)
