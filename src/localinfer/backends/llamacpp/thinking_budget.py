"""A reasoning model's thinking cut at a budget of tokens: past it, the model's own end-of-thinking marker is
written in its place (llama-server's ``--reasoning-budget``), and the answer starts.

The inference thread asks ``forced`` before it samples a slot's next token; a token it returns is taken as if
sampled (the sampler chain is told, so penalties and a grammar that follows see it). ``taken`` is told every token
taken, sampled or forced, to follow the thinking: it opens when the model writes the opening marker (or the prompt
ended inside it), counts the tokens in it, and closes when the closing marker comes, written or forced. What is
forced may go on past the closing marker: a harmony model (gpt-oss) gets ``<|end|>`` and the start of its final
message, ``<|start|>assistant<|channel|>final<|message|>``, so it answers rather than opening another analysis
(llama-server forces only ``<|end|>``). Thinking is cut once: a model that opens a second block thinks on
unbudgeted (a harmony model may: llama-server budgets each block afresh).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.types import ThinkingBudget


@dataclass
class ThinkingCutter:
    """Follows one request's thinking by token ids, and forces ``close`` once ``budget`` thinking tokens are spent."""

    budget: int
    open: tuple[int, ...]
    close: tuple[int, ...]
    inside: bool  # the prompt ended inside the thinking
    forcing: tuple[int, ...] = ()  # what a spent budget writes (empty: ``close``)
    spent: int = 0
    done: bool = False  # the thinking has closed (or never can open again)
    _forcing: list[int] = field(default_factory=list)
    _recent: list[int] = field(default_factory=list)

    def forced(self) -> int | None:
        """The token to take next in the model's place, or None to sample. Thinking with no budget left starts
        the closing marker here."""
        if self.inside and not self._forcing and self.spent >= self.budget:
            self._forcing = list(self.forcing or self.close)
        return self._forcing.pop(0) if self._forcing else None

    def taken(self, token: int) -> None:
        if self.done:
            return
        self._recent = [*self._recent, token][-max(len(self.open), len(self.close)) :]
        if not self.inside:
            if _ends_with(self._recent, self.open):
                self.inside = True
            return
        if _ends_with(self._recent, self.close):  # what is still to force after it is forced on
            self.inside, self.done = False, True
            return
        if not self._forcing:
            self.spent += 1


def _ends_with(tokens: list[int], marker: tuple[int, ...]) -> bool:
    return bool(marker) and tuple(tokens[-len(marker) :]) == marker


def thinking_cutter(model: LlamaModel, budget: ThinkingBudget | None) -> ThinkingCutter | None:
    """What cuts a reasoning model's thinking at ``budget`` (None: no budget), its markers as the model's tokens."""
    if budget is None:
        return None
    markers = budget.markers
    return ThinkingCutter(
        budget=budget.tokens,
        open=tuple(model.tokenize(markers.open, add_special=False, parse_special=True)),
        close=tuple(model.tokenize(markers.close, add_special=False, parse_special=True)),
        inside=budget.inside,
        forcing=tuple(model.tokenize(markers.close + markers.answer, add_special=False, parse_special=True)),
    )
