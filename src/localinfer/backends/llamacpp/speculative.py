"""Speculative decoding's proposals: tokens guessed cheaply, which the step loop verifies in one batch.

The step loop feeds a generating slot's next token followed by a draft, samples at each position in turn with the
request's own sampler, and keeps the draft up to the first token the sampler did not pick. Every token kept is one
the target model sampled given the text before it, so greedy output is token for token what it is without a draft
wherever llama.cpp computes a token's logits alike in a step of one and of several (test_step_width.py says where),
and sampled output follows the model's distribution (a draft that always proposes one token is the degenerate
case of rejection sampling: accept it exactly when the sample equals it).

*Prompt lookup* (prompt_lookup.py) needs no second model: the last few tokens of the text so far are looked up in
the prompt, what was generated and what the model generated for recent requests, and the tokens that followed the
best match are the draft. It pays when the reply repeats text (an edited file, a quoted answer, a regenerated
reply) and costs little elsewhere: only a match proposes anything, and a draft is fed only as far as the tokens it
is expected to add are worth more than what it adds to the step (step_costs.py). A *draft model* (draft_model.py)
guesses from a small model of the same vocabulary instead, and pays on free text too when it often agrees with
the target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from localinfer.backends.llamacpp.step_costs import StepCosts

FIRST_DRAFT = 8  # a draft model's first draft; it doubles while drafts are kept
# The running chance that a drafted token is kept (Speculation.keep_rate): a first guess of 3/4 worth two tokens,
# and counts of drafted tokens judged in which each weighs RATE_DECAY of the one after it (about the last 50).
PRIOR_KEPT, PRIOR_MISSED = 1.5, 0.5
RATE_DECAY = 0.98
SHADOW_MAX = 8  # a proposal not fed is scored on its first tokens only, so drafting resumes soon when they match


class DraftSource(Protocol):
    """Proposes the tokens that may follow a request's text so far."""

    def extend(self, tokens: Sequence[int]) -> None:
        """``tokens`` were appended to the text (the prompt at first, then each step's kept tokens)."""

    def propose(self, n_max: int) -> list[int]:
        """At most ``n_max`` tokens likely to follow the text so far; none when there is no good guess."""


# A request's draft source, from its prompt and whether it may draft from other requests' outputs (not when its
# text must be the same whatever else was asked: a greedy or seeded request, SamplingParams.reproducible).
PromptDraftFactory = Callable[[Sequence[int], bool], DraftSource]
# The same, also given the slot's sequence id (where a draft model keeps its cache).
DraftFactory = Callable[[Sequence[int], int, bool], DraftSource]


def expected_kept(p: float, n: int) -> float:
    """How many tokens of an ``n``-token draft are expected to be kept when each is kept with probability ``p``
    once those before it were: p + p^2 + ... + p^n."""
    return n if p >= 1.0 else p * (1.0 - p**n) / (1.0 - p)


def candidate_lengths(width: int, n_max: int) -> list[int]:
    """The draft lengths worth weighing for a step already ``width`` tokens wide: those that make the step a power
    of two wide (where matrix kernels change: StepCosts), and the whole proposal."""
    lengths = {n_max}
    size = 2
    while size - width <= n_max:
        if size > width:
            lengths.add(size - width)
        size *= 2
    return sorted(lengths)


@dataclass
class Speculation:
    """One request's drafting: its source, how long a draft is, and what was proposed and kept so far.

    With ``costs`` (prompt lookup, whose proposals cost nothing to make), each draft is cut to the length that
    gives the most tokens per millisecond of step: the tokens expected kept, at the running rate ``keep_rate``,
    against what StepCosts says a step that wide takes. When no length beats a step without a draft, the proposal
    is not fed but scored, for free, against the tokens the model then generates (a *shadow* draft), so the rate
    keeps following the text and drafting resumes when it starts repeating.

    Without ``costs`` (a draft model, whose proposals already cost its own steps and stop where it is unsure),
    every proposal is fed; the length asked doubles (up to ``draft_max``) when a whole draft was kept and falls to
    one more than what was kept when it was not. A proposal shorter than ``draft_min`` is dropped either way."""

    source: DraftSource
    draft_max: int
    draft_min: int = 0
    costs: StepCosts | None = None
    n_draft: int = 0  # without costs, the length asked of the source next; FIRST_DRAFT (or draft_max) at first
    proposed: int = 0  # draft tokens fed to the model (llama-server's draft_n)
    accepted: int = 0  # of those, kept (draft_n_accepted)
    kept: float = 0.0  # drafted tokens kept, fed or shadow, each weighed down by RATE_DECAY per later one judged
    missed: float = 0.0  # drafted tokens the model did not pick (one a draft at most), weighed the same way
    shadow: list[int] = field(default_factory=list)  # a proposal not fed, checked against what comes
    shadow_matched: int = 0

    def __post_init__(self) -> None:
        self.n_draft = self.n_draft or min(self.draft_max, FIRST_DRAFT)

    @property
    def keep_rate(self) -> float:
        """The chance that a drafted token is kept once those before it were (PRIOR_KEPT and PRIOR_MISSED are a
        first guess of 3/4, worth two tokens)."""
        return (self.kept + PRIOR_KEPT) / (self.kept + self.missed + PRIOR_KEPT + PRIOR_MISSED)

    def draft(self, room: int, width: int = 1) -> list[int]:
        """The next draft, at most ``room`` tokens (what the batch, the context and the request's token limit
        leave), for a step already ``width`` tokens wide with this slot's next token."""
        if self.shadow:
            return []  # the last proposal is still being scored
        limit = min(self.draft_max if self.costs is not None else self.n_draft, room)
        tokens = self.source.propose(limit)[:limit]  # never past the batch, whatever the source returns
        if len(tokens) < max(self.draft_min, 1):
            return []
        if self.costs is None:
            return tokens
        n = self._paying_length(self.costs, width, len(tokens))
        if n == 0:
            self.shadow, self.shadow_matched = tokens[:SHADOW_MAX], 0
        return tokens[:n]

    def _paying_length(self, costs: StepCosts, width: int, n_max: int) -> int:
        """The draft length, up to ``n_max``, with the most tokens expected per ms of step; 0 when a step without
        a draft gives more (or nothing is measured yet)."""
        plain = costs.estimate(width)
        if plain is None:
            return 0
        p = self.keep_rate
        best_n, best = 0, width / plain
        for n in candidate_lengths(width, n_max):
            ms = costs.estimate(width + n)
            if n < self.draft_min or ms is None:
                continue
            value = (width + expected_kept(p, n)) / ms
            if value > best:
                best_n, best = n, value
        return best_n

    def verified(self, fed: Sequence[int], n_accepted: int, kept: Sequence[int]) -> None:
        """``fed`` draft tokens went into a step and ``n_accepted`` of them were kept; ``kept`` (the tokens that
        now end the text, accepted drafts and the sampled one) join the source's text."""
        if fed:
            self.proposed += len(fed)
            self.accepted += n_accepted
            self._scored(len(fed), n_accepted)
        elif self.shadow:
            self._score_shadow(kept)
        self.source.extend(kept)

    def _score_shadow(self, kept: Sequence[int]) -> None:
        for token in kept:
            if token != self.shadow[self.shadow_matched]:
                break
            self.shadow_matched += 1
            if self.shadow_matched == len(self.shadow):
                break
        else:
            return  # all matched so far, and more of it to check
        self._scored(len(self.shadow), self.shadow_matched)
        self.shadow, self.shadow_matched = [], 0

    def _scored(self, n_drafted: int, n_kept: int) -> None:
        full = n_kept == n_drafted
        if self.costs is None:  # the length asked follows what was kept; no rate is weighed
            self.n_draft = min(self.draft_max, self.n_draft * 2) if full else max(1, n_kept + 1)
            return
        judged = n_kept if full else n_kept + 1  # the tokens after a rejected one say nothing
        fade = RATE_DECAY**judged
        self.kept = fade * self.kept + n_kept
        self.missed = fade * self.missed + (0 if full else 1)
