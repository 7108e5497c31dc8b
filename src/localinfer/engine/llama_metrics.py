"""llama-server's ``/metrics`` series (``llamacpp:prompt_tokens_total``...), with its names, types, help texts and
meaning, so that a dashboard made for llama-server reads localinfer unchanged.

Where the figures come from: each llama.cpp model's decode loop counts what llama-server's counts (its
``DecodeStats``: decodes, busy slots per decode, prompt tokens computed and their time, tokens sampled and their
time, drafts). A model served by a backend without such a loop here (ONNX Runtime) is counted from its requests'
usage and timings instead, and has no decodes to count.

Labels: llama-server serves one model and labels none of these. Here too they carry no label: each is the total over
every model this engine has served (the sum of the counters, the largest ``n_tokens_max``, the slots of all loaded
models), so a server started with one model answers exactly as one llama-server on that model would. Asked for one
model (``/metrics?model=NAME``), they are that model's alone, as llama-server's router mode answers the same query.
The ``localinfer_*`` series carry the per-model breakdown, labelled by model.

The two throughput gauges are averaged, as llama-server's are, over the time since the previous scrape (of the
same model, or of all); counters only grow, across a model's unloads and reloads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from localinfer.backends.base import DecodeStats, SlotUsage
from localinfer.types import Timings, Usage

PREFIX: Final = "llamacpp:"

Figure = Callable[[DecodeStats], float]

# (name, help, figure): in llama-server's order, counters first
COUNTERS: Final[tuple[tuple[str, str, Figure], ...]] = (
    (
        "prompt_tokens_total",
        "Number of prompt tokens processed, excluding cached tokens",
        lambda s: s.prompt_tokens,
    ),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", lambda s: s.cached_tokens),
    ("prompt_seconds_total", "Total time spent processing prompts", lambda s: s.prompt_seconds),
    ("tokens_predicted_total", "Number of generation tokens processed", lambda s: s.predicted_tokens),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens", lambda s: s.predicted_seconds),
    (
        "n_decode_total",
        "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
        lambda s: s.decodes,
    ),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)", lambda s: s.max_tokens),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", lambda s: s.drafted),
    (
        "spec_decode_num_accepted_tokens_total",
        "Speculative: Total draft tokens accepted by the target model",
        lambda s: s.draft_accepted,
    ),
    (
        "spec_decode_num_drafts_total",
        "Speculative: Total speculative decoding verification steps",
        lambda s: s.draft_steps,
    ),
)
PER_POSITION: Final = "spec_decode_num_accepted_tokens_per_pos_total"


@dataclass(frozen=True)
class _Window:
    """The counters the throughput gauges were last averaged to."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    predicted_steps: int = 0
    predicted_seconds: float = 0.0


class LlamaServerSeries:
    def __init__(self) -> None:
        # one DecodeStats per load of each model (a few dozen bytes each), so counts survive unloads
        self._loops: dict[str, list[DecodeStats]] = {}
        self._by_requests: dict[str, DecodeStats] = {}
        self._windows: dict[str | None, _Window] = {}

    def track(self, model: str, stats: DecodeStats | None) -> None:
        """Count ``model``'s newly loaded decode loop, ``stats`` (None: its backend has none; its requests are
        counted by ``count_request``)."""
        if stats is not None:
            self._loops.setdefault(model, []).append(stats)

    def count_request(self, model: str, usage: Usage, timings: Timings | None) -> None:
        """Count a finished request of ``model`` where no decode loop of its own counts it."""
        if model in self._loops:
            return
        stats = self._by_requests.setdefault(model, DecodeStats())
        stats.cached_tokens += usage.cached_tokens
        stats.ended(usage.completion_tokens, timings.predicted_ms / 1000.0 if timings is not None else 0.0)
        if usage.prompt_tokens > usage.cached_tokens:
            stats.prompt_tokens += usage.prompt_tokens - usage.cached_tokens
            stats.prompt_seconds += timings.prompt_ms / 1000.0 if timings is not None else 0.0
        if timings is not None:
            stats.drafted += timings.draft_n
            stats.draft_accepted += timings.draft_n_accepted

    def render(self, usage: Mapping[str, SlotUsage], model: str | None = None) -> str:
        """The series in Prometheus' text format, as llama-server writes them: over every model, or ``model``'s
        alone; ``usage`` is each loaded model's slots now. Starts the next averaging window of the gauges."""
        stats = _total(
            [*(s for m, loops in self._loops.items() if model in (None, m) for s in loops)]
            + [s for m, s in self._by_requests.items() if model in (None, m)]
        )
        busy = sum((u for m, u in usage.items() if model in (None, m)), SlotUsage())
        last = self._windows.get(model, _Window())
        now = _Window(stats.prompt_tokens, stats.prompt_seconds, stats.predicted_steps, stats.predicted_seconds)
        self._windows[model] = now
        gauges: list[tuple[str, str, float]] = [
            (
                "prompt_tokens_seconds",
                "Average prompt throughput in tokens/s",
                _rate(now.prompt_tokens - last.prompt_tokens, now.prompt_seconds - last.prompt_seconds),
            ),
            (
                "predicted_tokens_seconds",
                "Average generation throughput in tokens/s",
                _rate(now.predicted_steps - last.predicted_steps, now.predicted_seconds - last.predicted_seconds),
            ),
            ("requests_processing", "Number of requests processing", busy.processing),
            ("requests_deferred", "Number of requests deferred", busy.waiting),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per llama_decode() call",
                stats.busy_slots / max(stats.decodes, 1),
            ),
        ]
        lines: list[str] = []
        for kind, series in (
            ("counter", [(name, text, figure(stats)) for name, text, figure in COUNTERS]),
            ("gauge", gauges),
        ):
            for name, text, value in series:
                lines += [
                    f"# HELP {PREFIX}{name} {text}",
                    f"# TYPE {PREFIX}{name} {kind}",
                    f"{PREFIX}{name} {_v(value)}",
                ]
        if stats.accepted_at:  # as llama-server: only once a draft has been verified
            lines += [
                f"# HELP {PREFIX}{PER_POSITION} Accepted tokens per draft position",
                f"# TYPE {PREFIX}{PER_POSITION} counter",
                *(f'{PREFIX}{PER_POSITION}{{position="{i}"}} {n}' for i, n in enumerate(stats.accepted_at)),
            ]
        return "\n".join(lines) + "\n"


def _total(stats: Iterable[DecodeStats]) -> DecodeStats:
    total = DecodeStats()
    for s in stats:
        accepted_at = list(s.accepted_at)  # one read: the inference thread may be growing it
        for field in dataclasses.fields(DecodeStats):
            if field.name not in ("max_tokens", "accepted_at"):
                setattr(total, field.name, getattr(total, field.name) + getattr(s, field.name))
        total.max_tokens = max(total.max_tokens, s.max_tokens)
        if len(total.accepted_at) < len(accepted_at):
            total.accepted_at.extend([0] * (len(accepted_at) - len(total.accepted_at)))
        for i, n in enumerate(accepted_at):
            total.accepted_at[i] += n
    return total


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _v(value: float) -> str:
    """A value as Prometheus reads it: whole numbers without a fraction, others at full precision."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
