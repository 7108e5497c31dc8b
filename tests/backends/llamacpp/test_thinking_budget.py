"""A thinking budget by token ids (backends/llamacpp/thinking_budget.py): the tokens it forces once the budget is
spent, a one-token end (``</think>``) or a harmony model's end and start of its final message, and what it counts."""

from __future__ import annotations

from localinfer.backends.llamacpp.thinking_budget import ThinkingCutter

OPEN, END, START, ASSISTANT, CHANNEL, FINAL, MESSAGE = 1, 2, 3, 4, 5, 6, 7
HARMONY_END = (END, START, ASSISTANT, CHANNEL, FINAL, MESSAGE)


def steps(cutter: ThinkingCutter, sampled: list[int]) -> list[int]:
    """The tokens taken when the model would sample ``sampled`` in turn and the cutter forces what it forces."""
    taken = []
    for token in sampled:
        forced = cutter.forced()
        taken.append(token if forced is None else forced)
        cutter.taken(taken[-1])
    return taken


def test_a_spent_budget_forces_the_closing_marker_then_lets_the_model_go_on() -> None:
    cutter = ThinkingCutter(budget=2, open=(OPEN,), close=(END,), inside=True)
    assert steps(cutter, [10, 11, 12, 13, 14]) == [10, 11, END, 13, 14]
    assert (cutter.spent, cutter.done) == (2, True)


def test_a_harmony_budget_forces_the_end_and_the_whole_start_of_the_final_message() -> None:
    cutter = ThinkingCutter(budget=2, open=(CHANNEL, 8, MESSAGE), close=(END,), inside=True, forcing=HARMONY_END)
    assert steps(cutter, [10, 11, 12, 12, 12, 12, 12, 12, 20]) == [10, 11, *HARMONY_END, 20]
    assert cutter.spent == 2


def test_a_model_that_ends_its_thinking_itself_is_not_forced() -> None:
    cutter = ThinkingCutter(budget=5, open=(OPEN,), close=(END,), inside=False, forcing=HARMONY_END)
    assert steps(cutter, [OPEN, 10, END, 11, 12, 13, 14, 15, 16]) == [OPEN, 10, END, 11, 12, 13, 14, 15, 16]
    assert cutter.spent == 1
