"""Prompt lookup: drafts copied from text the model has already seen, found by the n-gram that ends the text so far.

A request's own text (its prompt, then what it has generated) is searched, and so is what the model generated for
recent requests (``RecentOutputs``, shared by the slots of a loaded model): a reply that repeats an earlier one (a
regenerated answer, an editor asking again as the user types, an agent retrying a step) is drafted from it. Of the
texts where the n-gram occurs, the one whose text before it goes on matching the longest wins, the request's own
on a tie: a longer context predicts better. llama-server's ngram-mod also remembers across requests, in one hash
table of 24-token n-grams.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

# n-gram lengths looked up, longest first: a longer match predicts better. Three tokens match too often in free
# text, where the draft is then mostly wrong and costs a wider batch.
LOOKUP_SIZES = (6, 4)
# A draft reaches twice as far past the match as the text before it goes on matching (TextIndex.find), looked at up
# to MATCH_CHECKED tokens back, and at least SHORT_REACH tokens.
MATCH_CHECKED = 32
SHORT_REACH = 8
# What is kept from recent requests' outputs, the newest first: RECENT_TOKENS generated tokens (about 5 MB of index)
# in at most RECENT_OUTPUTS outputs (each is searched at every step: short ones must not pile up).
RECENT_TOKENS = 16384
RECENT_OUTPUTS = 64


class TextIndex:
    """A text of tokens and, for each n-gram length of ``LOOKUP_SIZES``, the position that followed each n-gram's
    latest occurrence."""

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self.tokens: list[int] = []
        self._follows: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in LOOKUP_SIZES}
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        text = self.tokens
        for token in tokens:
            end = len(text)
            for n, follows in self._follows.items():
                if end >= n:
                    follows[tuple(text[end - n : end])] = end  # text[end] follows this n-gram
            text.append(token)

    def find(self, context: Sequence[int]) -> tuple[int, int] | None:
        """Where what follows the end of ``context`` is in this text (after the latest occurrence of the longest
        n-gram that ends ``context``), and how many tokens before that position match the end of ``context``: the
        n-gram's length at least, MATCH_CHECKED at most. None when no n-gram occurs."""
        for n, follows in self._follows.items():
            if len(context) < n:
                continue
            start = follows.get(tuple(context[-n:]))
            if start is not None:
                return start, self._matched(context, start, n)
        return None

    def _matched(self, context: Sequence[int], start: int, n: int) -> int:
        text = self.tokens
        matched = n
        while (
            matched < MATCH_CHECKED
            and min(start, len(context)) - matched - 1 >= 0
            and text[start - matched - 1] == context[-matched - 1]
        ):
            matched += 1
        return matched


class RecentOutputs:
    """What the model generated for recent requests, each output indexed as it is written. When an output is opened
    the oldest go, until the others hold at most ``max_tokens`` and ``max_outputs`` - 1 of them (an output being
    written grows past that by its request's own tokens). Used from the step loop's thread only."""

    def __init__(self, max_tokens: int = RECENT_TOKENS, max_outputs: int = RECENT_OUTPUTS) -> None:
        self._outputs: deque[TextIndex] = deque()
        self._max_tokens = max_tokens
        self._max_outputs = max_outputs

    def __len__(self) -> int:
        return len(self._outputs)

    def open(self) -> TextIndex:
        """A new output, to be extended as its request generates."""
        output = TextIndex()
        total = sum(len(o.tokens) for o in self._outputs)
        while self._outputs and (total > self._max_tokens or len(self._outputs) >= self._max_outputs):
            total -= len(self._outputs.popleft().tokens)
        self._outputs.append(output)
        return output

    def find(self, context: Sequence[int], besides: TextIndex | None) -> tuple[TextIndex, int, int] | None:
        """The output other than ``besides`` whose text before what follows the end of ``context`` matches it the
        longest (the newest on a tie), with where that is and how long the match (TextIndex.find)."""
        best: tuple[TextIndex, int, int] | None = None
        for output in reversed(self._outputs):
            found = output.find(context) if output is not besides else None
            if found is not None and (best is None or found[1] > best[2]):
                best = (output, *found)
        return best


class NgramDraft:
    """Prompt lookup over one request's text (prompt, then output) and, given ``recent`` and unless ``own_text_only``,
    what the model generated for other requests; this request's output joins ``recent`` from its first token on
    either way (a request that generates nothing, such as an editor warming the cache, adds nothing).

    ``own_text_only`` is for a request whose text must not depend on others (NgramPool): a step of several tokens
    is not always computed as a step of one, so a draft found in another request's output could change its text."""

    def __init__(
        self, prompt: Sequence[int], recent: RecentOutputs | None = None, *, own_text_only: bool = False
    ) -> None:
        self._text = TextIndex(prompt)
        self._recent = recent
        self._drafts_from: RecentOutputs | None = None if own_text_only else recent
        self._output: TextIndex | None = None

    def extend(self, tokens: Sequence[int]) -> None:
        self._text.extend(tokens)
        if self._recent is not None and tokens:
            if self._output is None:
                self._output = self._recent.open()
            self._output.extend(tokens)

    def propose(self, n_max: int) -> list[int]:
        """What followed the best match (the module's doc), reaching twice as far as the match (SHORT_REACH at
        least): a reply that has been copying for a while is likely to go on, one that shares a few words with the
        prompt is not."""
        if n_max <= 0:
            return []
        text = self._text.tokens
        own = self._text.find(text)
        other = self._drafts_from.find(text, besides=self._output) if self._drafts_from is not None else None
        if other is not None and (own is None or other[2] > own[1]):
            output, start, matched = other
            return output.tokens[start : start + _reach(n_max, matched)]
        if own is None:
            return []
        start, matched = own
        reach = _reach(n_max, matched)
        draft = text[start : start + reach]
        period = len(text) - start
        while len(draft) < reach:  # past the end of the text: a repeat goes on repeating
            draft.append(draft[-period])
        return draft


def _reach(n_max: int, matched: int) -> int:
    return min(n_max, max(SHORT_REACH, 2 * matched))


class NgramPool:
    """Prompt lookup for the requests of one loaded model, which share their recent outputs: a request made with
    ``shared`` drafts from them too, one without (a greedy or seeded request: its text must not depend on what
    others asked, nor on whether its own earlier answer is still remembered) from its own text only."""

    def __init__(self, recent: RecentOutputs | None = None) -> None:
        self._recent = recent if recent is not None else RecentOutputs()

    def __call__(self, prompt: Sequence[int], shared: bool) -> NgramDraft:
        return NgramDraft(prompt, self._recent, own_text_only=not shared)
