"""How a loaded model speculates: the step loop's Drafting for a load, from its flags, its device and where its
drafts come from (prompt lookup or a draft model)."""

from __future__ import annotations

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.draft_model import DraftModel
from localinfer.backends.llamacpp.model import LlamaModel
from localinfer.backends.llamacpp.speculative import PromptDraftFactory
from localinfer.backends.llamacpp.step_costs import RuleCosts, StepCosts
from localinfer.backends.llamacpp.step_loop import Drafting

# On a CPU, a step's cost grows with every token past the first (SmolLM2 Q4_1 on 2 cores: 30 ms for one token,
# 16-20 ms a token for 2-63: step_costs.py), so once two slots generate a drafted token costs nearly
# what a generated one does: with 8 streams, prompt lookup took aggregate tok/s from 1.03x to 0.84x of llama-server's
# (docs/benchmarks.md). Drafts are fed there only while one slot generates; a model offloaded to a GPU, whose steps
# cost about the same up to dozens of tokens, drafts for every slot. (The step costs would say the same; the rule
# also keeps several slots' drafts from being weighed against one another.)
CPU_DRAFTING_SLOTS = 1


def drafting(
    spec: LoadSpec,
    model: LlamaModel,
    source: PromptDraftFactory,
    draft_model: DraftModel | None,
    slots: int | None = None,
    costs: StepCosts | None = None,
) -> Drafting | None:
    """How the step loop speculates for ``spec`` on ``model``: with ``draft_model`` when there is one (fed whole),
    else with drafts from ``source`` (cut to what the step costs say pays: a greedy or seeded request's by ``costs``
    when given, else by RuleCosts), while at most ``slots`` slots generate (None: CPU_DRAFTING_SLOTS on a CPU, all
    of them on a GPU); not at all when speculation is off."""
    if spec.speculation == "off" or spec.draft_max <= 0:
        return None
    if slots is None:
        slots = model.n_seq_max if model.gpu_layers > 0 else min(CPU_DRAFTING_SLOTS, model.n_seq_max)
    return Drafting(
        draft_model.source if draft_model is not None else lambda prompt, _seq_id, shared: source(prompt, shared),
        spec.draft_max,
        spec.draft_min,
        weigh_costs=draft_model is None,  # a draft model's proposals cost its steps: fed whole (its p_min cuts them)
        max_generating=slots,
        reproducible_costs=costs or RuleCosts.for_device(model.gpu_layers > 0),
    )
