"""What a step costs: milliseconds per ``llama_decode`` by batch width, learnt as the step loop runs.

A draft pays when the tokens it is expected to add are worth more than what it adds to the step. That cost is not
a constant: on a 2-core CPU after 800 tokens of context, SmolLM2 (Q4_1) computes one token in ~19 ms and every
token of a 2-63 token batch in 8.5-14 ms (and of one sequence's 64 or more in ~6 ms, flash attention's tiled
kernel, which a slot's step does not reach: step_limits.MAX_SLOT_STEP), while Gemma 3 (Q4_K_M) falls from 27 ms to 4
ms a token (llama-bench, docs/benchmarks.md); on a GPU, dozens of tokens cost what one does. So the loop times
each step whose tokens all ask for logits (generating slots and their drafts: a prompt chunk's tokens are cheaper)
and speculative.py asks this table what a wider step would cost.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

# Before a width has been measured, each token past the first is guessed to cost this share of a one-token step:
# optimistic, so that wide drafts get tried (and so measured) when they are likely to be kept.
UNMEASURED_TOKEN_SHARE = 0.25
WEIGHT = 0.25  # of the latest step in a width's running cost


class StepCosts:
    def __init__(self, measured: Mapping[int, float] | None = None) -> None:
        """A table learnt from the steps recorded, starting from ``measured`` (ms by width) when given."""
        self._ms: dict[int, float] = dict(measured or {})
        self._widths: list[int] = sorted(self._ms)  # the widths measured, in order
        self._once: set[int] = set()  # widths measured once: that step also built a graph of a new shape

    def record(self, width: int, ms: float) -> None:
        """A step of ``width`` tokens, each with logits, took ``ms``. A width's first step also builds llama.cpp's
        graph for that shape, and may meet a busy moment: it counts for no more than the guess it was chosen on,
        so the width is tried again, and the second step replaces it."""
        if width <= 0 or ms <= 0:
            return
        known = self._ms.get(width)
        if known is None:
            guess = self.estimate(width)
            bisect.insort(self._widths, width)
            self._ms[width] = ms if guess is None else min(ms, guess)
            self._once.add(width)
        elif width in self._once:
            self._ms[width] = ms
            self._once.discard(width)
        else:
            self._ms[width] = known + WEIGHT * (ms - known)

    def estimate(self, width: int) -> float | None:
        """The ms a step of ``width`` tokens is expected to take: as measured, else interpolated between the
        nearest widths measured on either side. Below the narrowest measured, it is that step's cost per token
        (while several slots generate, a one-token step may never come). Past the widest measured it is a guess,
        the cheaper of going on from there and of a one-token step plus UNMEASURED_TOKEN_SHARE of one per token, so
        that a width whose tokens cost less (a GPU's, or another kernel's) gets tried. None until a step has been
        measured."""
        if not self._widths or width <= 0:
            return None
        known = self._ms.get(width)
        if known is not None:
            return known
        i = bisect.bisect_left(self._widths, width)
        if i == 0:
            narrowest = self._widths[0]
            return self._ms[narrowest] * width / narrowest
        below = self._widths[i - 1]
        if i == len(self._widths):
            one = self.estimate(1) or 0.0
            guess = one * (1.0 + (width - 1) * UNMEASURED_TOKEN_SHARE)
            return min(self._ms[below] + (width - below) * UNMEASURED_TOKEN_SHARE * one, guess)
        above = self._widths[i]
        share = (width - below) / (above - below)
        return self._ms[below] + share * (self._ms[above] - self._ms[below])


# What each token past the first adds to a step, as a share of a one-token step, for RuleCosts: on a CPU, SmolLM2 on
# 2 cores measured 0.5-0.6 through steps of 2-63 tokens (Gemma 3 Q4_K_M, bound by reading its weights, 0.15); on a
# GPU dozens of tokens cost about what one does.
CPU_TOKEN_SHARE = 0.5
GPU_TOKEN_SHARE = 0.02


class RuleCosts(StepCosts):
    """Step costs by a rule, not measured: a step of ``width`` tokens costs one token's step and ``token_share`` of
    one for each further token. The drafts of a request whose text must be the same every time it is asked (greedy
    or seeded) are cut by it: cut by timings, a draft fed one time and not the next is verified in a step of several
    tokens one time and of one the next, which on some CPUs computes a near-tie otherwise."""

    def __init__(self, token_share: float) -> None:
        super().__init__({1: 1.0})
        self._token_share = token_share

    @classmethod
    def for_device(cls, on_gpu: bool) -> RuleCosts:
        return cls(GPU_TOKEN_SHARE if on_gpu else CPU_TOKEN_SHARE)

    def record(self, width: int, ms: float) -> None:
        pass  # a rule learns nothing

    def estimate(self, width: int) -> float | None:
        return 1.0 + self._token_share * (width - 1) if width > 0 else None
