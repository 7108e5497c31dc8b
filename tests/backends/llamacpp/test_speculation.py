"""Speculative decoding by prompt lookup, and a prompt prefix shared between slots.

The drafting policy on its own (Speculation) is plain Python; the rest runs the real step loop on
SmolLM2 (instruct) and Gemma 3 (a base model): greedy output with speculation is the output without it, token for
token, alone and inside a batch of four; a draft source that is always wrong changes nothing but the counts; a
seeded sampled reply is the same too (each kept token is sampled from the model's own distribution, with the same
random draws); and a prefix computed in one slot is copied into another. The edit replies end within 256 tokens of
context (EDIT_REPLY). Past 256, llama.cpp computes a lone token with another kernel than a wider step
(test_step_width.py), and replies that ran to 320 tokens differed with and without drafts on an AMD CPU (AVX2)
where an Intel one (AVX-512) had no near-tie in them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.backend import LlamaCppBackend
from localinfer.backends.llamacpp.slot_cache import MIN_SHARED_PREFIX
from localinfer.backends.llamacpp.speculative import SHADOW_MAX, Speculation
from localinfer.backends.llamacpp.step_costs import UNMEASURED_TOKEN_SHARE, WEIGHT, RuleCosts, StepCosts
from localinfer.models.store import Manifest
from localinfer.types import GenerationOptions, GenerationRequest, SamplingParams, Timings, TokenLogprob
from tests.conftest import GEMMA3_PACKAGE

PARSE_CONFIG = '''def parse_config(path):
    """Read a key = value file into a dict, skipping comments and blank lines."""
    settings = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"line {number}: expected key = value")
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings
'''
MERGE_CONFIGS = '''def merge_configs(base, override):
    """The base settings with every key of the override replacing it."""
    merged = dict(base)
    for key, value in override.items():
        merged[key] = value
    return merged
'''
CODE = PARSE_CONFIG + "\n\n" + MERGE_CONFIGS
# An instruct model asked to repeat a file with one change; a base model given the start of the file again. The file
# is one function, so that prompt and reply fit in 256 cells (EDIT_REPLY).
EDIT_CHAT = (
    "<|im_start|>user\nHere is a Python file:\n\n"
    + PARSE_CONFIG
    + "\nRepeat the file exactly, with parse_config renamed to"
    " read_config.<|im_end|>\n<|im_start|>assistant\n"
)
EDIT_BASE = "File config.py, version 1:\n\n" + PARSE_CONFIG + "\n\nFile config.py, version 2 (read_config):\n\ndef "
# Within 256 cells of context, llama.cpp computes a token alike in a step of one and in a wider one: SmolLM2 at any
# width, Gemma 3 (its repacked weights) in steps of up to three rows (test_step_width.py). The edit prompts are 162
# (SmolLM2) and 167 (Gemma 3) tokens.
ALIKE_CELLS = 256
GEMMA3_ALIKE_ROWS = 3
EDIT_REPLY = 88


def alike_drafts(manifest: Manifest) -> dict[str, int]:
    """Load options that keep a lone request's every step at a width llama.cpp computes as it does a lone token
    (within 256 cells): any width on SmolLM2; on Gemma 3, drafts short enough that a step stays within
    GEMMA3_ALIKE_ROWS. Wider steps on Gemma 3 keep greedy text only where no pick is a near-tie: the edit reply
    changed with 62-token drafts on an AMD CPU (AVX2)."""
    return {"draft_max": GEMMA3_ALIKE_ROWS - 1} if manifest.source == f"pypi:{GEMMA3_PACKAGE}" else {}


def within_alike_cells(timings: Timings) -> bool:
    """Whether every token a reply fed to the model (all but its last) sat within ALIKE_CELLS cells of context, for
    a reply from a fresh backend (its whole prompt computed): the last one fed sits at the 0-based cell
    prompt_n + predicted_n - 2 (predicted_n counts every token generated)."""
    return timings.prompt_n + timings.predicted_n - 2 <= ALIKE_CELLS


def greedy(max_tokens: int, *, cache_prompt: bool = True) -> GenerationOptions:
    return GenerationOptions(
        sampling=SamplingParams(temperature=0.0), max_tokens=max_tokens, ignore_eos=True, cache_prompt=cache_prompt
    )


async def reply(backend: LlamaCppBackend, prompt: str, options: GenerationOptions) -> tuple[str, Timings]:
    text, timings = "", None
    async for chunk in backend.generate(GenerationRequest("test", prompt, options)):
        text += chunk.text
        timings = chunk.timings or timings
    assert timings is not None
    return text, timings


class FixedCosts(StepCosts):
    """Step costs that stay as given, so which drafts are fed does not depend on how fast this CPU is."""

    def record(self, width: int, ms: float) -> None:
        pass


async def loaded(manifest: Manifest, *, parallel: int = 1, **spec: object) -> LlamaCppBackend:
    """The model loaded with ``parallel`` slots, drafting for all of them at once, with the step costs of a 2-core
    CPU for one slot and of a GPU for more (on a CPU it drafts only while one slot generates, and a step's cost grows
    with each token past one, which would leave the batch tests without drafts)."""
    costs = FixedCosts(dict(CPU_COSTS if parallel == 1 else GPU_COSTS))
    backend = LlamaCppBackend(drafting_slots=parallel, step_costs=costs)
    await backend.load(LoadSpec(path=manifest.path, ctx_size=2048, parallel=parallel, threads=2, **spec))  # type: ignore[arg-type]
    return backend


async def replies(manifest: Manifest, prompts: Sequence[str], options: GenerationOptions, **spec: object) -> list[str]:
    backend = await loaded(manifest, parallel=len(prompts), **spec)
    try:
        done = await asyncio.gather(*(reply(backend, prompt, options) for prompt in prompts))
        return [text for text, _ in done]
    finally:
        await backend.unload()


# --- the proposals ----------------------------------------------------------------------------------------------


class Fixed:
    """A draft source that proposes what it is given, whatever the text."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)
        self.text: list[int] = []

    def extend(self, tokens: Sequence[int]) -> None:
        self.text.extend(tokens)

    def propose(self, n_max: int) -> list[int]:
        return self.tokens[:n_max]


def test_without_step_costs_the_draft_grows_while_it_is_kept_and_shrinks_to_what_was_kept() -> None:
    source = Fixed(range(100))  # a draft model's proposals: fed whole, their length asked as they were kept
    spec = Speculation(source, draft_max=16, n_draft=4)
    assert spec.draft(room=100) == [0, 1, 2, 3]
    spec.verified([0, 1, 2, 3], 4, [0, 1, 2, 3, 9])
    assert len(spec.draft(room=100)) == 8  # all kept: twice as long
    spec.verified(list(range(8)), 2, [0, 1, 5])
    assert len(spec.draft(room=100)) == 3  # two kept: one more than that
    assert len(spec.draft(room=2)) == 2  # never past the room left
    assert (spec.proposed, spec.accepted, source.text) == (12, 6, [0, 1, 2, 3, 9, 0, 1, 5])
    assert Speculation(Fixed([1, 2]), draft_max=16, draft_min=3).draft(room=100) == []  # too short to verify


def costs(*measured: tuple[int, float]) -> StepCosts:
    return StepCosts(dict(measured))


def test_step_costs_are_measured_interpolated_and_guessed_on_past_the_widest() -> None:
    assert StepCosts().estimate(1) is None  # nothing to go on before one step
    assert costs((4, 80.0)).estimate(1) == 20.0  # below the narrowest measured: its cost per token
    table = costs((1, 30.0), (16, 280.0), (64, 470.0))
    assert table.estimate(16) == 280.0
    assert table.estimate(40) == pytest.approx(375.0)  # halfway from 16 to 64
    assert table.estimate(2) == pytest.approx(30.0 + 250.0 / 15)
    assert table.estimate(80) == pytest.approx(470.0 + 16 * UNMEASURED_TOKEN_SHARE * 30.0)
    slow_so_far = costs((1, 30.0), (32, 526.0))  # past one token, each costs 16 ms up to 32 tokens
    assert slow_so_far.estimate(64) == pytest.approx(30.0 * (1 + 63 * UNMEASURED_TOKEN_SHARE))  # 64 may be cheaper
    table.record(16, 180.0)
    assert table.estimate(16) == pytest.approx(280.0 - WEIGHT * 100.0)  # a running cost: one step moves it part way


def test_a_widths_first_step_counts_for_no_more_than_its_guess_and_the_second_replaces_it() -> None:
    table = StepCosts()
    table.record(1, 30.0)
    guess = table.estimate(64)
    assert guess == pytest.approx(30.0 * (1 + 63 * UNMEASURED_TOKEN_SHARE))
    table.record(64, 900.0)  # the first step of 64 also built llama.cpp's graph for that shape
    assert table.estimate(64) == guess  # so 64 is tried again...
    table.record(64, 480.0)
    assert table.estimate(64) == 480.0  # ...and its second step is what it costs
    table.record(64, 400.0)
    assert table.estimate(64) == pytest.approx(480.0 - WEIGHT * 80.0)


# Measured on a 2-core CPU (SmolLM2 Q4_1): a token costs 30 ms alone, 16-20 ms in a step of 2-63 tokens and 7 ms
# from 64 on. A GPU computes dozens of tokens in the time of one.
CPU_COSTS = (
    (1, 30.0), (2, 48.0), (4, 74.0), (8, 152.0), (16, 279.0), (32, 526.0), (48, 880.0), (63, 1273.0), (64, 474.0),
    (128, 876.0),
)  # fmt: skip
GPU_COSTS = ((1, 10.0), (2, 10.2), (4, 10.4), (8, 10.8), (16, 11.6), (32, 13.0), (64, 16.0))


def test_a_draft_is_cut_to_the_length_the_step_costs_say_pays() -> None:
    proposal = Fixed(range(1000, 1100))

    def drafting(table: tuple[tuple[int, float], ...], kept: float = 0.0) -> Speculation:
        return Speculation(proposal, draft_max=64, costs=costs(*table), kept=kept)

    copying = 400.0  # drafted tokens lately kept, none missed: a text being copied
    assert len(drafting(CPU_COSTS, copying).draft(room=100)) == 64  # a step of 65, where a token costs 7 ms
    assert len(drafting(CPU_COSTS, copying).draft(room=56)) == 31  # a step of 57 would cost 20 ms a token
    assert len(drafting(CPU_COSTS, copying).draft(room=56, width=8)) == 56  # beside 7 others: a step of 64
    assert drafting(CPU_COSTS).draft(room=100) == [1000, 1001, 1002]  # the first guess, 3/4 kept: a cheap step of 4
    assert len(drafting(GPU_COSTS).draft(room=100)) == 15  # wide steps cost little more: longer at the same guess
    unmeasured = Speculation(proposal, draft_max=64, costs=StepCosts())
    assert unmeasured.draft(room=100) == [] and unmeasured.shadow  # no step timed yet: scored, not fed


def test_a_reproducible_requests_drafts_are_cut_by_a_rule_that_timings_do_not_move() -> None:
    """A greedy or seeded request's drafts are cut by RuleCosts: the same proposal at the same rate gets the same
    length whatever steps were timed, where the measured table cuts it at what the latest steps took."""
    rule = RuleCosts.for_device(on_gpu=False)
    first = Speculation(Fixed(range(1000, 1100)), draft_max=64, costs=rule)
    before = first.draft(room=100)
    rule.record(1, 1.0)  # a one-token step timed far cheaper than the rule says: nothing moves
    rule.record(2, 500.0)
    again = Speculation(Fixed(range(1000, 1100)), draft_max=64, costs=rule)
    assert again.draft(room=100) == before == [1000]  # the first guess, 3/4 kept: one token on a CPU
    measured = costs(*CPU_COSTS)
    assert Speculation(Fixed(range(1000, 1100)), draft_max=64, costs=measured).draft(room=100) == [1000, 1001, 1002]
    measured.record(2, 10.0)  # a quick step of two (a quiet moment) moves the measured table...
    measured.record(2, 10.0)
    assert Speculation(Fixed(range(1000, 1100)), draft_max=64, costs=measured).draft(room=100) == [
        1000
    ]  # ...and the cut
    copying = Speculation(Fixed(range(1000, 1100)), draft_max=64, costs=rule, kept=400.0)
    assert len(copying.draft(room=100)) == 31  # a text being copied: a step of 32 by the CPU's rule
    on_gpu = Speculation(Fixed(range(1000, 1100)), draft_max=64, costs=RuleCosts.for_device(on_gpu=True), kept=400.0)
    assert len(on_gpu.draft(room=100)) == 64


def test_drafts_that_are_mostly_rejected_stop_being_fed_until_shadow_drafts_would_have_been_kept() -> None:
    spec = Speculation(Fixed([7] * 100), draft_max=64, costs=costs(*CPU_COSTS))
    fed = 0
    while draft := spec.draft(room=100):  # every draft rejected at its first token
        assert set(draft) == {7}
        fed += len(draft)
        spec.verified(draft, 0, [5])
        assert fed < 20
    assert fed >= 3 and (spec.proposed, spec.accepted) == (fed, 0)
    assert spec.shadow and len(spec.shadow) == SHADOW_MAX  # no longer fed: scored against what comes
    spec.verified([], 0, [5])  # the shadow's first token was wrong
    rounds = 0
    while not (draft := spec.draft(room=100)):  # the text now repeats what is proposed: every shadow is kept
        assert spec.shadow
        spec.verified([], 0, list(spec.shadow))
        rounds += 1
        assert rounds < 10
    assert (spec.proposed, spec.accepted) == (fed, 0)  # shadows are not counted as drafted
    for _ in range(20):  # fed again, and longer while every draft is kept
        spec.verified(draft, len(draft), [*draft, 7])
        draft = spec.draft(room=100)
    assert len(draft) >= 63  # a step of 64 or more, where a token costs 7 ms


# --- the real step loop -----------------------------------------------------------------------------------------


@pytest.fixture(params=["smollm2", "gemma3"])
def edit_case(request: pytest.FixtureRequest) -> tuple[Manifest, str]:
    manifest: Manifest = request.getfixturevalue(request.param)
    return manifest, EDIT_CHAT if request.param == "smollm2" else EDIT_BASE


@pytest.mark.model
async def test_greedy_output_with_prompt_lookup_is_the_output_without_it(edit_case: tuple[Manifest, str]) -> None:
    manifest, prompt = edit_case
    plain = await loaded(manifest, speculation="off")
    try:
        expected, plain_timings = await reply(plain, prompt, greedy(EDIT_REPLY))
    finally:
        await plain.unload()
    speculating = await loaded(manifest, **alike_drafts(manifest))
    try:
        text, timings = await reply(speculating, prompt, greedy(EDIT_REPLY))
    finally:
        await speculating.unload()
    assert within_alike_cells(timings), timings
    assert text == expected and text.strip()
    assert (plain_timings.draft_n, plain_timings.draft_n_accepted) == (0, 0)
    # the reply copies the file: a good part of it comes from drafts, verified several tokens per step
    assert timings.draft_n_accepted >= 16, timings
    assert timings.draft_n >= timings.draft_n_accepted
    assert timings.predicted_n == plain_timings.predicted_n


@pytest.mark.model
async def test_with_the_step_costs_it_measures_itself_the_backend_drafts_a_copy(smollm2: Manifest) -> None:
    """The default backend times its own steps (the other tests fix the costs, so that what is drafted does not
    depend on this CPU): a reply that copies the file still gets drafts verified several tokens a step."""
    backend = LlamaCppBackend()
    await backend.load(LoadSpec(path=smollm2.path, ctx_size=2048, parallel=1, threads=2))
    try:
        text, timings = await reply(backend, EDIT_CHAT, greedy(96))
    finally:
        await backend.unload()
    assert text.strip() and timings.draft_n_accepted > 0, timings


# Short enough to be computed in one piece whatever else runs (a prompt computed in pieces, or after a prefix
# taken from a cache, may differ in the last bits of its logits and so in a near-tie).
QUOTES = [
    "The keeper wrote: the lamp was lit at six, the sea was calm, and two ships passed the point before midnight.",
    "The recipe says: mix the flour with the salt, add the water slowly, and knead the dough for ten minutes.",
    "The manual says: press the red button twice, wait for the green light, and then turn the handle to the left.",
    "The letter said: we arrived in the city on Tuesday, found the hotel near the station, and slept until noon.",
]


def batch_prompts(chat: bool) -> list[str]:
    if chat:
        return [f"<|im_start|>user\nRepeat this twice: {q}<|im_end|>\n<|im_start|>assistant\n" for q in QUOTES]
    # The base model's prompt ends with the quote's first word: without it, Gemma 3's first pick for the manual was a
    # near-tie (" The" 0.53 logits over " Press"), which a batch of four computed the other way in one CI run.
    return [f"{q}\nAgain, word for word: {q}\nAgain, word for word: {q.split()[0]}" for q in QUOTES]


@pytest.mark.model
async def test_greedy_output_inside_a_batch_of_four_is_the_output_alone_without_speculation(
    edit_case: tuple[Manifest, str],
) -> None:
    alone, together = await alone_and_in_a_batch_of_four(*edit_case)
    assert [text for text, _ in together] == alone
    assert sum(timings.draft_n_accepted for _, timings in together) >= 20  # the repeats were drafted


async def alone_and_in_a_batch_of_four(
    manifest: Manifest, prompt: str, **spec: object
) -> tuple[list[str], list[tuple[str, Timings]]]:
    """The four quotes of ``prompt``'s kind (chat or base), each greedy without speculation in a context of its
    own, then all four at once in one context of four slots loaded with ``spec``, with their timings."""
    prompts = batch_prompts(prompt is EDIT_CHAT)
    alone = [(await replies(manifest, [p], greedy(40), speculation="off"))[0] for p in prompts]
    backend = await loaded(manifest, parallel=4, **spec)
    try:
        together = await asyncio.gather(*(reply(backend, p, greedy(40)) for p in prompts))
    finally:
        await backend.unload()
    return alone, together


class AlwaysWrong:
    """Proposes tokens the model never picks next: ids it has just sampled, repeated (a text that stutters)."""

    def __init__(self, prompt: Sequence[int], shared: bool) -> None:
        self.last = prompt[-1]

    def extend(self, tokens: Sequence[int]) -> None:
        if tokens:
            self.last = tokens[-1]

    def propose(self, n_max: int) -> list[int]:
        return [self.last] * n_max


@pytest.mark.model
async def test_a_draft_that_is_always_wrong_changes_nothing_but_the_counts(smollm2: Manifest) -> None:
    plain = await loaded(smollm2, speculation="off")
    try:
        expected, _ = await reply(plain, EDIT_CHAT, greedy(40))
    finally:
        await plain.unload()
    backend = LlamaCppBackend(draft_source=AlwaysWrong, step_costs=FixedCosts(dict(CPU_COSTS)))
    await backend.load(LoadSpec(path=smollm2.path, ctx_size=2048, parallel=1, threads=2, draft_max=4))
    try:
        text, timings = await reply(backend, EDIT_CHAT, greedy(40))
    finally:
        await backend.unload()
    assert text == expected
    assert timings.draft_n > 0 and timings.draft_n_accepted < timings.draft_n  # fed and rejected...
    assert timings.draft_n < 39  # ...until the rejections stopped them being fed


@pytest.mark.model
async def test_a_seeded_sampled_reply_is_the_same_with_and_without_speculation(smollm2: Manifest) -> None:
    options = GenerationOptions(
        sampling=SamplingParams(temperature=0.7, top_k=40, top_p=0.95, seed=1234), max_tokens=64, ignore_eos=True
    )
    [without] = await replies(smollm2, [EDIT_CHAT], options, speculation="off")
    [with_drafts] = await replies(smollm2, [EDIT_CHAT], options)
    assert with_drafts == without and without.strip()


@pytest.mark.model
async def test_on_a_cpu_drafts_wait_while_another_slot_generates(smollm2: Manifest) -> None:
    """A drafted token costs about what a generated one does in a batch two tokens wide or more on a CPU, so the
    default backend drafts only while one slot generates: a quote repeated alongside another stream gets no
    drafts, the same quote alone gets them."""
    [quote] = batch_prompts(chat=True)[:1]
    backend = LlamaCppBackend(step_costs=FixedCosts(dict(CPU_COSTS)))
    await backend.load(LoadSpec(path=smollm2.path, ctx_size=2048, parallel=2, threads=2))
    try:
        _, alone = await reply(backend, quote, greedy(40))
        running = streaming(backend, chat("Tell me a long story about the sea."), greedy(400))
        await anext(running)  # the other stream is generating, and goes on past the quote's 40 tokens
        text, beside = await reply(backend, quote, greedy(40))
        await running.aclose()
    finally:
        await backend.unload()
    assert alone.draft_n_accepted >= 8, alone
    assert beside.draft_n == 0 and text.strip(), beside


# --- a prefix shared between slots ------------------------------------------------------------------------------

SYSTEM = "<|im_start|>system\nYou are a careful assistant for this code base:\n\n" + CODE * 2 + "<|im_end|>\n"


def chat(question: str) -> str:
    return SYSTEM + f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


async def streaming(backend: LlamaCppBackend, prompt: str, options: GenerationOptions) -> AsyncGenerator[str]:
    async for chunk in backend.generate(GenerationRequest("test", prompt, options)):
        yield chunk.text


async def first_tokens(backend: LlamaCppBackend, prompt: str) -> tuple[list[TokenLogprob], Timings]:
    """The first 8 tokens of the greedy reply, each with its log-probability and the 5 most likely."""
    options = GenerationOptions(sampling=SamplingParams(temperature=0.0), max_tokens=8, ignore_eos=True, logprobs=5)
    tokens: list[TokenLogprob] = []
    timings = None
    async for chunk in backend.generate(GenerationRequest("test", prompt, options)):
        tokens.extend(chunk.logprobs)
        timings = chunk.timings or timings
    assert timings is not None
    return tokens, timings


@pytest.mark.model
async def test_a_prefix_computed_in_one_slot_is_copied_into_another(smollm2: Manifest) -> None:
    # The copy is compared as llama-server computes a prompt, the last token with it. With the last token in a step
    # of its own (the default, #42) the two runs part, and not because the copied cells sit elsewhere: a lone token
    # over the same prefix gives the same logits bit for bit whether the prefix is the slot's own, copied whole from
    # another stream, computed fresh, or placed after a gap. They part because of the slots' order in that step.
    # With a cache stream per slot, llama.cpp's sequential split keeps a step's tokens in one micro-batch only while
    # their sequence ids ascend. Here the copy's last token (slot 1) follows slot 0's generated token, so the two are
    # computed together (flash attention's one-chunk kernel over two streams). The own-cache run's last token (slot
    # 0) follows slot 1's, so it is split off and computed alone; once a stream holds over 256 cells (padded to
    # 512), a lone token takes the split-KV kernel. SmolLM2's first logits differed by up to 0.87 between the two
    # orders (docs/serving.md). Feeding a step's slots in ascending order would make the two runs compute alike.
    first, second = chat("What does parse_config skip?"), chat("What does merge_configs return?")
    backend = await loaded(smollm2, parallel=2, speculation="off", last_token_alone=False)
    try:
        n_system = len(await backend.tokenize(SYSTEM, add_special=False, parse_special=True))
        n_second = len(await backend.tokenize(second, add_special=True, parse_special=True))
        assert n_system > MIN_SHARED_PREFIX
        running = streaming(backend, first, greedy(200))
        await anext(running)  # the first conversation holds slot 0, its prompt computed
        shared, timings = await first_tokens(backend, second)  # slot 1, which has nothing cached
        await running.aclose()
        slots = backend.slots()
    finally:
        await backend.unload()
    assert timings.cache_shared_n >= n_system - 1, timings
    assert timings.prompt_n == n_second - timings.cache_shared_n  # only the question was computed
    assert all(slot.n_cached > n_system for slot in slots)
    # The copy is exact: the reply, and its probabilities, are those of a slot reusing the prefix from its own
    # cache while another slot generates (a batch of one row computes the last bits differently, so that is the
    # reference, not a context with one slot).
    own = await loaded(smollm2, parallel=2, speculation="off", last_token_alone=False)
    try:
        await reply(own, first, greedy(1))  # slot 0
        other = streaming(own, "Tell me a story about the sea and the moon.", greedy(200))
        await anext(other)  # slot 1, generating
        reused, own_timings = await first_tokens(own, second)  # slot 0 again
        await other.aclose()
    finally:
        await own.unload()
    assert own_timings.cache_shared_n == 0 and own_timings.prompt_n == timings.prompt_n
    assert [t.token for t in shared] == [t.token for t in reused]
    assert [t.logprob for t in shared] == [t.logprob for t in reused]
    assert [t.top for t in shared] == [t.top for t in reused]
