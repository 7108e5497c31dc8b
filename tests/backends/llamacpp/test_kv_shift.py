"""Which runs of a slot's cache a new prompt has again (kv_shift.reuse_plan): llama-server's rule (a run only where
the prompt goes on from what is kept: tokens removed) and ours with a scratch sequence (after tokens inserted too),
by example and as properties over any edit of a prompt."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from localinfer.backends.llamacpp.kv_shift import Run, reuse_plan

FILE = list(range(1000, 1600))  # 600 distinct tokens: a file with no repeats


def test_tokens_removed_after_the_prefix_leave_the_rest_to_move_back() -> None:
    cached, prompt = FILE, FILE[:100] + FILE[150:]
    assert reuse_plan(cached, prompt, 100, 64, inserts=False) == [Run(150, 100, 449)]


def test_tokens_inserted_move_nothing_by_llama_servers_rule() -> None:
    cached, prompt = FILE, [*FILE[:300], 7, 8, *FILE[300:]]
    assert reuse_plan(cached, prompt, 300, 64, inserts=False) == []


def test_tokens_inserted_move_the_rest_on_with_a_scratch_sequence() -> None:
    cached, prompt = FILE, [*FILE[:300], 7, 8, *FILE[300:]]
    assert reuse_plan(cached, prompt, 300, 64, inserts=True) == [Run(300, 302, 299)]


def test_a_token_replaced_moves_the_rest_in_place() -> None:
    cached, prompt = FILE, [*FILE[:300], 7, *FILE[301:]]
    assert reuse_plan(cached, prompt, 300, 64, inserts=True) == [Run(301, 301, 298)]


def test_the_last_prompt_token_is_always_computed() -> None:
    cached, prompt = [*FILE, 1, 2, 3], FILE[:10] + FILE[20:]  # the old cache held a reply after the file
    (run,) = reuse_plan(cached, prompt, 10, 64, inserts=True)
    assert run.target + run.length == len(prompt) - 1


def test_a_run_shorter_than_the_minimum_is_computed() -> None:
    cached, prompt = FILE[:200], [*FILE[:100], 5, *FILE[100:150], 6]
    assert reuse_plan(cached, prompt, 100, 64, inserts=True) == []


@given(
    cut=st.integers(0, 599),
    removed=st.integers(0, 120),
    inserted=st.lists(st.integers(0, 50), max_size=40),
    min_run=st.sampled_from([8, 16, 64, 256]),
    inserts=st.booleans(),
)
def test_runs_are_in_order_long_enough_and_say_true(
    cut: int, removed: int, inserted: list[int], min_run: int, inserts: bool
) -> None:
    cached = FILE
    prompt = FILE[:cut] + inserted + FILE[cut + removed :]
    start = min(cut, len(prompt) - 1)
    runs = reuse_plan(cached, prompt, start, min_run, inserts=inserts)
    source_end = target_end = start
    for run in runs:
        assert run.length >= min_run
        assert run.source >= source_end and run.target >= target_end  # in order, no overlaps
        assert cached[run.source : run.source + run.length] == prompt[run.target : run.target + run.length]
        assert run.target + run.length <= len(prompt) - 1
        if not inserts:
            assert run.target == target_end  # llama-server's: right after what is kept
        source_end, target_end = run.source + run.length, run.target + run.length


@given(cut=st.integers(0, 500), inserted=st.lists(st.integers(0, 50), min_size=1, max_size=10))
def test_an_insertion_leaves_only_the_inserted_tokens_and_the_last_to_compute(cut: int, inserted: list[int]) -> None:
    prompt = FILE[:cut] + inserted + FILE[cut:]
    runs = reuse_plan(FILE, prompt, cut, 64, inserts=True)
    moved = sum(run.length for run in runs)
    tail = len(FILE) - cut
    assert moved == (tail - 1 if tail - 1 >= 64 else 0)
