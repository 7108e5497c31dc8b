"""Prompt lookup's proposals (plain Python), and drafts taken from what the model generated for an earlier request
(the real step loop on SmolLM2)."""

from __future__ import annotations

import pytest

from localinfer.backends.llamacpp.prompt_lookup import NgramDraft, NgramPool, RecentOutputs
from localinfer.models.store import Manifest
from localinfer.types import GenerationOptions, SamplingParams
from tests.backends.llamacpp.test_speculation import greedy, loaded, reply


def test_prompt_lookup_proposes_what_followed_the_latest_earlier_occurrence() -> None:
    draft = NgramDraft([0, 1, 2, 3, 4, 5, 9, 0, 1, 2, 3, 4, 7, 8, 1, 2, 3, 4])
    assert draft.propose(3) == [7, 8, 1]  # "1 2 3 4" last came before "7 8", not before "5 9"
    assert draft.propose(1) == [7]
    draft.extend([7, 8])
    assert draft.propose(6) == [1, 2, 3, 4, 7, 8]  # up to the end of the text...
    assert draft.propose(9) == [1, 2, 3, 4, 7, 8, 1, 2, 3]  # ...and on: a text that repeats goes on repeating
    assert NgramDraft([1, 2, 3, 4, 5]).propose(4) == []  # no earlier occurrence: no guess
    assert NgramDraft([1, 2, 3, 9, 1, 2, 3]).propose(4) == []  # three tokens in common are not enough
    assert NgramDraft([5, 5, 5]).propose(0) == []


def test_a_prompt_lookup_draft_reaches_further_the_longer_the_reply_has_been_copying() -> None:
    document = list(range(100, 200))
    few_words = NgramDraft([*document, 1, 2, *document[50:56]])  # six tokens in common with the document
    assert few_words.propose(64) == document[56:68]  # twice as many past them
    copying = NgramDraft([*document, 1, 2, *document[20:56]])  # 36 in common: the reply is quoting it
    assert copying.propose(64) == [*document[56:], 1, 2, *document[20:38]]  # 64, what followed there
    assert copying.propose(10) == document[56:66]


def test_a_reply_that_repeats_an_earlier_output_is_drafted_from_it() -> None:
    recent = RecentOutputs()
    first = NgramDraft([1, 2, 3], recent)
    story = list(range(100, 160))
    first.extend(story)  # what the model generated for the first request
    again = [4, 5, 6, *story[:6]]  # another prompt, and a reply that starts the same way
    assert NgramDraft(again, recent).propose(64) == story[6:18]  # six tokens matched: twelve past them
    assert NgramDraft(again).propose(64) == []  # its own text has nothing to draft from


def test_a_greedy_or_seeded_request_adds_to_the_recent_outputs_but_drafts_from_its_own_text() -> None:
    pool = NgramPool()
    story = list(range(100, 160))
    pool([1, 2, 3], True).extend(story)  # a sampled request's output
    reproducible = pool([4, 5, 6, *story[:6]], False)
    assert reproducible.propose(64) == []  # the output would be drafted from: not for this one
    reproducible.extend([7, 8, 9, *story[30:40]])
    assert pool([8, 9, *story[30:32]], True).propose(4) == story[32:36]  # its output is there for the others


def test_the_text_whose_context_matches_longest_is_drafted_from_the_requests_own_on_a_tie() -> None:
    recent = RecentOutputs()
    NgramDraft([], recent).extend([50, 51, 1, 2, 3, 4, 5, 6, 90, 91, 92])  # an earlier output
    tie = NgramDraft([1, 2, 3, 4, 5, 6, 70, 71, 72, 1, 2, 3, 4, 5, 6], recent)  # six tokens in common with both
    assert tie.propose(3) == [70, 71, 72]
    longer = NgramDraft([1, 2, 3, 4, 5, 6, 70, 71, 72, 51, 1, 2, 3, 4, 5, 6], recent)  # seven with the output
    assert longer.propose(3) == [90, 91, 92]


def test_recent_outputs_keep_the_newest_within_their_budget() -> None:
    recent = RecentOutputs(max_tokens=100)
    NgramDraft([], recent).extend(range(1000, 1060))
    NgramDraft([], recent).extend(range(2000, 2060))  # 120 tokens in all: the oldest goes at the next output
    NgramDraft([], recent).extend(range(3000, 3010))
    assert NgramDraft(list(range(1000, 1006)), recent).propose(4) == []
    assert NgramDraft(list(range(2000, 2006)), recent).propose(4) == [2006, 2007, 2008, 2009]


def test_of_two_earlier_outputs_that_match_as_long_the_newest_is_drafted_from() -> None:
    recent = RecentOutputs()
    NgramDraft([], recent).extend([1, 2, 3, 4, 5, 6, 80, 81])
    NgramDraft([], recent).extend([1, 2, 3, 4, 5, 6, 90, 91])
    assert NgramDraft([9, 1, 2, 3, 4, 5, 6], recent).propose(2) == [90, 91]


def test_a_request_that_generates_nothing_adds_no_output_and_outputs_are_capped_in_number() -> None:
    recent = RecentOutputs(max_outputs=3)
    NgramDraft([1, 2, 3], recent).extend([])  # an editor warming the cache (max_tokens 0)
    assert len(recent) == 0
    for first in (100, 200, 300, 400):
        NgramDraft([], recent).extend(range(first, first + 10))
    assert len(recent) == 3
    assert NgramDraft(list(range(100, 106)), recent).propose(2) == []  # the oldest went
    assert NgramDraft(list(range(400, 406)), recent).propose(2) == [406, 407]


STORY = (
    "<|im_start|>user\nWrite a short story about a lighthouse keeper who finds a message in a bottle.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.mark.model
async def test_a_greedy_reply_asked_again_is_drafted_as_the_first_and_so_is_the_same_text(smollm2: Manifest) -> None:
    """A greedy request's text must not depend on what was asked before (issue #42): asked again with its prompt
    cached, it is drafted from its own text only, exactly as the first time, not from the first reply (which a
    step of several tokens verifies with other kernels than a step of one: on some CPUs a near-tie flips)."""
    backend = await loaded(smollm2)
    try:
        first, first_timings = await reply(backend, STORY, greedy(96, cache_prompt=False))
        again, again_timings = await reply(backend, STORY, greedy(96))
    finally:
        await backend.unload()
    assert again_timings.prompt_n == 1 and again_timings.cache_n > 0  # all but the last token came cached
    assert (again_timings.draft_n, again_timings.draft_n_accepted) == (
        first_timings.draft_n,
        first_timings.draft_n_accepted,
    )
    assert again == first and first.strip()


@pytest.mark.model
async def test_a_sampled_reply_without_a_seed_is_drafted_from_an_earlier_output(smollm2: Manifest) -> None:
    """Free text repeats nothing of its prompt, so the greedy reply gets few drafts; asked again sampled without a
    seed (top-k 1: the same words, but nothing to reproduce), drafts from the first output are kept, several tokens
    a step."""
    plain = await loaded(smollm2, speculation="off")
    try:
        expected, _ = await reply(plain, STORY, greedy(96, cache_prompt=False))
    finally:
        await plain.unload()
    unseeded = GenerationOptions(sampling=SamplingParams(temperature=0.8, top_k=1), max_tokens=96, ignore_eos=True)
    backend = await loaded(smollm2)
    try:
        first, first_timings = await reply(backend, STORY, greedy(96, cache_prompt=False))
        again, again_timings = await reply(backend, STORY, unseeded)
    finally:
        await backend.unload()
    assert first == again == expected and expected.strip()
    assert first_timings.draft_n_accepted < 16, first_timings
    assert again_timings.draft_n_accepted >= 64, again_timings  # of the 95 tokens after the first
    assert again_timings.draft_n_accepted > first_timings.draft_n_accepted + 48
