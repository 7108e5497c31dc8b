"""Speculative decoding's proposals: tokens guessed cheaply, which the step loop verifies in one batch.

The step loop feeds a generating slot's next token followed by a draft, samples at each position in turn with the
request's own sampler, and keeps the draft up to the first token the sampler did not pick. Every token kept is one
the target model sampled given the text before it, so greedy output is token for token what it is without a draft,
and sampled output follows the model's distribution (a draft that always proposes one token is the degenerate
case of rejection sampling: accept it exactly when the sample equals it).

*Prompt lookup* (``NgramDraft``) needs no second model: the last few tokens of the text so far are looked up in
the prompt and what was generated, and the tokens that followed their latest earlier occurrence are the draft.
It pays when the reply repeats what the prompt says (an edited file, a quoted answer) and costs little elsewhere:
only a match proposes anything, and the draft length follows the acceptance rate. A *draft model*
(draft_model.py) guesses from a small model of the same vocabulary instead, and pays on free text too when it
often agrees with the target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# n-gram lengths looked up, longest first: a longer match predicts better. Three tokens match too often in free
# text, where the draft is then mostly wrong and costs a wider batch.
LOOKUP_SIZES = (6, 4)
FIRST_DRAFT = 8  # a request's first draft; it doubles while drafts are kept
MIN_RATE = 0.75  # drafts are fed while at least this share of their tokens is kept
RATE_WEIGHT = 0.3  # of the latest draft in the running share


class DraftSource(Protocol):
    """Proposes the tokens that may follow a request's text so far."""

    def extend(self, tokens: Sequence[int]) -> None:
        """``tokens`` were appended to the text (the prompt at first, then each step's kept tokens)."""

    def propose(self, n_max: int) -> list[int]:
        """At most ``n_max`` tokens likely to follow the text so far; none when there is no good guess."""


PromptDraftFactory = Callable[[Sequence[int]], DraftSource]  # a request's draft source, from its prompt
# a request's draft source, from its prompt and its slot's sequence id (where a draft model keeps its cache)
DraftFactory = Callable[[Sequence[int], int], DraftSource]


class NgramDraft:
    """Prompt lookup over one request's text (prompt, then output): for each n-gram length of ``LOOKUP_SIZES``,
    the position that followed each n-gram's latest occurrence."""

    def __init__(self, prompt: Sequence[int]) -> None:
        self._tokens: list[int] = []
        self._follows: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in LOOKUP_SIZES}
        self.extend(prompt)

    def extend(self, tokens: Sequence[int]) -> None:
        text = self._tokens
        for token in tokens:
            end = len(text)
            for n, follows in self._follows.items():
                if end >= n:
                    follows[tuple(text[end - n : end])] = end  # text[end] follows this n-gram
            text.append(token)

    def propose(self, n_max: int) -> list[int]:
        text = self._tokens
        if n_max <= 0:
            return []
        for n, follows in self._follows.items():
            if len(text) < n:
                continue
            start = follows.get(tuple(text[-n:]))
            if start is not None:
                return text[start : start + n_max]
        return []


@dataclass
class Speculation:
    """One request's drafting: its source, how long a draft is now, and what was proposed and kept so far.

    The draft length doubles (up to ``draft_max``) when a whole draft was kept and falls to one more than what was
    kept when it was not. Verifying a drafted token costs a share of a step (on a CPU, over half of one for some
    quantizations), so drafts are fed only while most of their tokens are kept: ``rate``, a running share of drafted
    tokens kept, must stay at ``MIN_RATE`` or above. Below it, proposals are still scored, for free, against the
    tokens the model then generates (a *shadow* draft), so drafting resumes when the text starts repeating. A
    proposal shorter than ``draft_min`` is dropped."""

    source: DraftSource
    draft_max: int
    draft_min: int = 0
    min_rate: float = MIN_RATE  # 0: every proposal is fed (a draft model's proposals cost its steps to make)
    n_draft: int = 0  # the length asked of the source next; FIRST_DRAFT (or draft_max) at first
    proposed: int = 0  # draft tokens fed to the model (llama-server's draft_n)
    accepted: int = 0  # of those, kept (draft_n_accepted)
    rate: float = 1.0  # running share of drafted tokens kept, fed or shadow
    shadow: list[int] = field(default_factory=list)  # a proposal not fed, checked against what comes
    shadow_matched: int = 0

    def __post_init__(self) -> None:
        self.n_draft = self.n_draft or min(self.draft_max, FIRST_DRAFT)

    def draft(self, room: int) -> list[int]:
        """The next draft, at most ``room`` tokens (what the context and the request's token limit leave)."""
        if self.shadow:
            return []  # the last proposal is still being scored
        tokens = self.source.propose(min(self.n_draft, room))
        if len(tokens) < max(self.draft_min, 1):
            return []
        if self.rate < self.min_rate:
            self.shadow, self.shadow_matched = tokens, 0
            return []
        return tokens

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
        self.n_draft = min(self.draft_max, self.n_draft * 2) if full else max(1, n_kept + 1)
        self.rate += RATE_WEIGHT * (n_kept / n_drafted - self.rate)
