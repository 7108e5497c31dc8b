"""What a step costs: milliseconds per ``llama_decode`` by batch width, learnt as the step loop runs.

A draft pays when the tokens it is expected to add are worth more than what it adds to the step. That cost is not
a constant: on a 2-core CPU, SmolLM2 (Q4_1) computes one token in ~30 ms, every token of a 2-63 token batch in
16-20 ms, and every token of a batch of 64 or more in ~7 ms (another matrix kernel), while Gemma 3 (Q4_K_M) falls
smoothly from 25 ms to 7 ms a token; on a GPU, dozens of tokens cost what one does. So the loop times each step
whose tokens all ask for logits (generating slots and their drafts: a prompt chunk's tokens are cheaper) and
speculative.py asks this table what a wider step would cost.
"""

from __future__ import annotations

import bisect

# Before a width has been measured, each token past the first is guessed to cost this share of a one-token step:
# optimistic, so that wide drafts get tried (and so measured) when they are likely to be kept.
UNMEASURED_TOKEN_SHARE = 0.25
WEIGHT = 0.25  # of the latest step in a width's running cost


class StepCosts:
    def __init__(self) -> None:
        self._ms: dict[int, float] = {}
        self._widths: list[int] = []  # the widths measured, in order

    def record(self, width: int, ms: float) -> None:
        """A step of ``width`` tokens, each with logits, took ``ms``."""
        if width <= 0 or ms <= 0:
            return
        known = self._ms.get(width)
        if known is None:
            bisect.insort(self._widths, width)
            self._ms[width] = ms
        else:
            self._ms[width] = known + WEIGHT * (ms - known)

    def estimate(self, width: int) -> float | None:
        """The ms a step of ``width`` tokens is expected to take: as measured, else interpolated between the
        nearest widths measured on either side. Past the widest measured it is a guess, the cheaper of going on
        from there and of a one-token step plus UNMEASURED_TOKEN_SHARE of one per token, so that a wider kernel
        (a CPU's past 63 tokens) gets tried once. None until a one-token step has been measured."""
        one = self._ms.get(1)
        if one is None:
            return None
        known = self._ms.get(width)
        if known is not None:
            return known
        i = bisect.bisect_left(self._widths, width)
        below = self._widths[i - 1]  # 1 is measured, so something lies below any width above it
        if i == len(self._widths):
            guess = one * (1.0 + (width - 1) * UNMEASURED_TOKEN_SHARE)
            return min(self._ms[below] + (width - below) * UNMEASURED_TOKEN_SHARE * one, guess)
        above = self._widths[i]
        share = (width - below) / (above - below)
        return self._ms[below] + share * (self._ms[above] - self._ms[below])
