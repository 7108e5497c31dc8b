"""A draft model: a small model with the target's vocabulary that guesses the next tokens (``--spec draft``).

It keeps one KV sequence per slot of the target, under the same id, so a slot's draft cache follows its
conversation and a later turn computes only what is new. A draft is the draft model's greedy continuation of the
text so far, stopped at the first token it is not confident of (``DRAFT_P_MIN``, as llama-server's --draft-p-min): a
doubtful guess costs a step of the draft model and a place in the target's batch, and is seldom kept. The target
verifies each draft with its own sampler (step_loop.py), so the draft model changes the speed only, never the text.

Only the inference thread calls this: it drafts for each generating slot before the target's step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import llama_cpp.llama_cpp as lc
import numpy as np

from localinfer.backends.base import LoadSpec
from localinfer.backends.llamacpp.job import common_prefix
from localinfer.backends.llamacpp.model import LlamaModel, vocabulary
from localinfer.backends.llamacpp.sampling import logits_at
from localinfer.errors import ModelLoadError

# A drafted token's probability under the draft model must reach this (llama-server's --draft-p-min: 0.75 in its
# releases of 2025; the one vendored here defaults to 0 with 3-token drafts).
DRAFT_P_MIN = 0.75
# Two sizes of one family may pad their embedding tables differently (Qwen2.5 0.5B: 151936 ids, 7B: 152064), as
# llama.cpp allows; the ids past the smaller table are never real text.
VOCAB_SIZE_SLACK = 128
VOCAB_CHECK_FROM = 5  # the first few ids are control tokens whose text families write differently


def vocab_mismatch(t: lc.llama_vocab_p, d: lc.llama_vocab_p) -> str | None:
    """Why a model of vocabulary ``d`` cannot draft for one of ``t`` (a different tokenizer: its token ids mean
    other text), or None when the two agree, by llama.cpp's rules (common_speculative_are_compatible)."""
    if lc.llama_vocab_type(t) != lc.llama_vocab_type(d):
        return "its tokenizer is of another kind"
    if (lc.llama_vocab_bos(t), lc.llama_vocab_eos(t)) != (lc.llama_vocab_bos(d), lc.llama_vocab_eos(d)):
        return "its begin and end tokens are other ids"
    n_target, n_draft = int(lc.llama_vocab_n_tokens(t)), int(lc.llama_vocab_n_tokens(d))
    if abs(n_target - n_draft) > VOCAB_SIZE_SLACK:
        return f"it has {n_draft} tokens, the model {n_target}"
    for token in range(VOCAB_CHECK_FROM, min(n_target, n_draft)):
        if lc.llama_vocab_get_text(t, token) != lc.llama_vocab_get_text(d, token):
            return f"token {token} is {lc.llama_vocab_get_text(d, token)!r}, not {lc.llama_vocab_get_text(t, token)!r}"
    return None


class DraftModel:
    """The draft model's context, one sequence per target slot, and what each sequence's cache holds."""

    def __init__(self, model: LlamaModel, *, target_vocab_size: int) -> None:
        assert model.ctx is not None, "a draft model is loaded"
        self._model = model
        self._ctx: lc.llama_context_p = model.ctx
        self._memory = lc.llama_get_memory(model.ctx)
        self._n_vocab = int(lc.llama_vocab_n_tokens(model.vocab))
        self._usable = min(self._n_vocab, target_vocab_size)  # a larger id would be outside the target's table
        self._batch = lc.llama_batch_init(model.n_batch, 0, 1)
        self._cached: list[list[int]] = [[] for _ in range(model.n_seq_max)]

    @classmethod
    def load(cls, spec: LoadSpec, target: LlamaModel) -> DraftModel:
        """Load ``spec.draft_path`` with a sequence per slot of ``target``, each as long as its context. Raises
        ModelLoadError when it cannot load, or when its vocabulary is not the target's."""
        if spec.draft_path is None:
            raise ModelLoadError("speculation by a draft model needs one", hint="name it with --draft MODEL")
        draft_spec = dataclasses.replace(  # it drafts nothing itself: a decode asks for one token's logits
            spec,
            path=spec.draft_path,
            ctx_size=target.n_ctx,
            parallel=target.n_seq_max,
            draft_path=None,
            cache_reuse=0,
            speculation="off",
        )
        model = LlamaModel.load(draft_spec)
        problem = vocab_mismatch(target.vocab, model.vocab)
        if problem is not None:
            model.free()
            raise _cannot_draft(spec, problem)
        return cls(model, target_vocab_size=int(lc.llama_vocab_n_tokens(target.vocab)))

    @staticmethod
    def check(spec: LoadSpec) -> None:
        """Refuse, from the two vocabularies alone (no weights read), a draft model that cannot draft for
        ``spec.path``. Raises ModelLoadError."""
        if spec.draft_path is None:
            raise ModelLoadError("speculation by a draft model needs one", hint="name it with --draft MODEL")
        with vocabulary(spec.path) as target, vocabulary(spec.draft_path) as draft:
            problem = vocab_mismatch(target, draft)
        if problem is not None:
            raise _cannot_draft(spec, problem)

    @property
    def model_bytes(self) -> int:
        """Its weights' size, counted with the served model's in what the backend reports."""
        return int(lc.llama_model_size(self._model.model))

    def source(self, prompt: Sequence[int], seq_id: int, shared: bool = True) -> ModelDraft:
        """A request's draft source: the draft model continuing its text in sequence ``seq_id`` (it drafts from that
        text alone, ``shared`` or not)."""
        return ModelDraft(self, prompt, seq_id)

    def free(self) -> None:
        lc.llama_batch_free(self._batch)
        self._model.free()

    def continuation(self, seq_id: int, text: Sequence[int], n_max: int) -> list[int]:
        """At most ``n_max`` tokens the draft model is confident follow ``text``: its greedy continuation, cut at
        the first token below DRAFT_P_MIN. The sequence's cache is brought to ``text`` first (what it holds
        beyond their common prefix, an earlier draft's rejected tail or another conversation, is replaced)."""
        if n_max <= 0 or not text or not self._caught_up(seq_id, text):
            return []
        cached = self._cached[seq_id]
        draft: list[int] = []
        while True:
            token, p = self._most_likely()
            if p < DRAFT_P_MIN or token >= self._usable or lc.llama_vocab_is_eog(self._model.vocab, token):
                return draft
            draft.append(token)
            if len(draft) == n_max or len(cached) + 1 >= self._model.n_ctx:
                return draft
            if not self._decode(seq_id, [token]):
                return draft

    def _caught_up(self, seq_id: int, text: Sequence[int]) -> bool:
        """The sequence's cache holds ``text`` and the logits after it are computed; False when the draft model
        cannot compute them (an id outside its table, a failed decode)."""
        cached = self._cached[seq_id]
        keep = common_prefix(cached, text)
        keep = min(keep, len(text) - 1)  # the last token is computed again: its logits are what drafting needs
        if not self._window_holds(seq_id, keep) or not lc.llama_memory_seq_rm(self._memory, seq_id, keep, -1):
            lc.llama_memory_seq_rm(self._memory, seq_id, -1, -1)
            keep = 0
        del cached[keep:]
        rest = text[keep:]
        if any(not 0 <= token < self._n_vocab for token in rest):
            return False
        for start in range(0, len(rest), self._model.n_batch):
            if not self._decode(seq_id, rest[start : start + self._model.n_batch]):
                return False
        return True

    def _window_holds(self, seq_id: int, n: int) -> bool:
        """A sliding-window cache still holds what the token after the first ``n`` attends to."""
        n_swa = self._model.n_swa
        pos_min = int(lc.llama_memory_seq_pos_min(self._memory, seq_id))
        return not n_swa or pos_min <= 0 or pos_min < n - n_swa

    def _decode(self, seq_id: int, tokens: Sequence[int]) -> bool:
        """Append ``tokens`` to the sequence, with logits for the last; on failure the sequence is cleared."""
        cached = self._cached[seq_id]
        batch = self._batch
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = len(cached) + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        if lc.llama_decode(self._ctx, batch) != 0:
            lc.llama_memory_seq_rm(self._memory, seq_id, -1, -1)
            cached.clear()
            return False
        cached.extend(tokens)
        return True

    def _most_likely(self) -> tuple[int, float]:
        """The most likely next token after the last decode, and its probability."""
        logits = logits_at(self._ctx, -1, self._n_vocab)
        top = int(logits.argmax())
        return top, float(1.0 / np.exp(logits - logits[top]).sum())


def _cannot_draft(spec: LoadSpec, problem: str) -> ModelLoadError:
    return ModelLoadError(
        f"the draft model {spec.draft_path} cannot draft for {spec.name or spec.path.name}: {problem}",
        hint="pick a smaller model of the same family (Qwen2.5-0.5B for Qwen2.5-7B), or --spec ngram",
    )


class ModelDraft:
    """One request's drafts from the draft model: its text so far, continued in its slot's sequence."""

    def __init__(self, drafter: DraftModel, prompt: Sequence[int], seq_id: int) -> None:
        self._drafter = drafter
        self._seq_id = seq_id
        self._text = list(prompt)

    def extend(self, tokens: Sequence[int]) -> None:
        self._text.extend(tokens)

    def propose(self, n_max: int) -> list[int]:
        return self._drafter.continuation(self._seq_id, self._text, n_max)
