"""How much one step asks of the context: how many tokens a slot's step holds, and how many logits the whole step.

A slot's step (its next token and the draft) stays under 64 tokens: ggml's CPU flash attention computes 64 or more
of a sequence's tokens with a tiled kernel (its products in f32) and fewer one row at a time (in f16), so a step of
64 gives other logits than single tokens do, and verifying a 63-token draft changed SmolLM2's greedy text
(test_attention.py). Below 64 the rows are computed as a single token's are, within 256 cells of context (past
that ggml computes a lone token with its split-KV kernel) and, for Gemma 3's repacked weights, below four rows
(test_step_width.py).

A step asks for logits at each slot's next token and at each token of its draft, never at a prompt's tokens but the
last. llama.cpp sizes its compute buffer for the most outputs a micro-batch may ask (``n_outputs_max``), and by
default that is every token of the batch: the logits of a 512-token micro-batch, 514.50 MiB for Gemma 3 270M (a
vocabulary of 262,144) where llama-server's context for one slot reserves 22.77 MiB, in device memory on a GPU. So
the context is made for what the step loop asks, as llama-server sizes it (``server_output_limits``: its slots
times one token and the longest draft, within the batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from localinfer.backends.base import LoadSpec

MAX_SLOT_STEP = 63


@dataclass(frozen=True)
class OutputLimits:
    """``outputs``: the most logits one ``llama_decode`` may ask (llama.cpp's ``n_outputs_max``: asking more aborts
    the process). ``draft_room``: the most draft tokens a slot's step may verify, so that a step of every slot's
    token and its longest draft asks no more than ``outputs``."""

    outputs: int
    draft_room: int


def output_limits(spec: LoadSpec, *, parallel: int, n_seq: int) -> OutputLimits:
    """The limits of a context of ``n_seq`` sequences of which ``parallel`` are slots (the others, localinfer's
    scratch sequence, only ever hold prompt tokens), drafting as ``spec`` says, in batches of ``spec.batch_size``."""
    room = min(spec.draft_max, MAX_SLOT_STEP - 1) if spec.speculation != "off" else 0
    room = max(0, min(room, (spec.batch_size - n_seq) // parallel))
    return OutputLimits(outputs=n_seq + parallel * room, draft_room=room)
