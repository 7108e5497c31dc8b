"""engine/llama_metrics.py: llama-server's series, unlabelled, over every model or one, from the decode loops'
counters (the end-to-end comparison with llama-server is tests/app/server/test_llamacpp_metrics.py)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from localinfer.backends.base import DecodeStats, SlotUsage
from localinfer.engine.llama_metrics import LlamaServerSeries
from localinfer.types import Timings, Usage


def values(text: str) -> dict[str, float]:
    """Each unlabelled sample by name (the parser names the counter n_tokens_max's sample n_tokens_max_total)."""
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def loop(**counts: int) -> DecodeStats:
    stats = DecodeStats()
    stats.decoded(busy=counts.get("busy", 1), longest=counts.get("longest", 10), prompt_tokens=9, seconds=0.5)
    stats.cached_tokens += counts.get("cached", 0)
    stats.ended(counts.get("sampled", 4), 0.25)
    return stats


def test_series_carry_no_label_and_total_every_models_counters() -> None:
    series = LlamaServerSeries()
    series.track("a", loop(longest=30, cached=2))
    series.track("b", loop(longest=20, busy=3))
    got = values(series.render({"a": SlotUsage(processing=1), "b": SlotUsage(processing=2, waiting=5)}))
    assert got["llamacpp:prompt_tokens_total"] == 18 and got["llamacpp:prompt_tokens_cached_total"] == 2
    assert got["llamacpp:tokens_predicted_total"] == 8 and got["llamacpp:n_decode_total"] == 2
    assert got["llamacpp:n_tokens_max_total"] == 30  # the longest, not a sum
    assert got["llamacpp:n_busy_slots_per_decode"] == 2.0
    assert got["llamacpp:requests_processing"] == 3 and got["llamacpp:requests_deferred"] == 5


def test_a_model_named_gets_its_own_series_alone() -> None:
    series = LlamaServerSeries()
    series.track("a", loop(longest=30))
    series.track("b", loop(longest=20, sampled=7))
    got = values(series.render({"a": SlotUsage(processing=1), "b": SlotUsage()}, "b"))
    assert got["llamacpp:tokens_predicted_total"] == 7 and got["llamacpp:n_tokens_max_total"] == 20
    assert got["llamacpp:requests_processing"] == 0


def test_counters_keep_growing_across_a_models_reload() -> None:
    series = LlamaServerSeries()
    series.track("a", loop())
    series.track("a", loop())  # loaded again: a new loop counting from zero
    assert values(series.render({}))["llamacpp:tokens_predicted_total"] == 8


def test_a_model_without_a_decode_loop_is_counted_from_its_requests() -> None:
    series = LlamaServerSeries()
    series.count_request("onnx", Usage(10, 5, 4), Timings(200.0, 400.0, 6, 4))
    got = values(series.render({}))
    assert got["llamacpp:prompt_tokens_total"] == 6 and got["llamacpp:prompt_tokens_cached_total"] == 4
    assert got["llamacpp:tokens_predicted_total"] == 5 and got["llamacpp:tokens_predicted_seconds_total"] == 0.4
    assert got["llamacpp:n_decode_total"] == 0


def test_a_request_of_a_model_with_a_decode_loop_is_counted_by_the_loop_alone() -> None:
    series = LlamaServerSeries()
    series.track("a", loop())
    series.count_request("a", Usage(10, 5, 4), None)
    assert values(series.render({}))["llamacpp:tokens_predicted_total"] == 4


def test_accepted_tokens_per_position_appear_once_a_draft_is_verified() -> None:
    series, stats = LlamaServerSeries(), DecodeStats()
    series.track("a", stats)
    assert "llamacpp:spec_decode_num_accepted_tokens_per_pos_total" not in series.render({})
    stats.verified(4, 2, 5)
    stats.verified(3, 3, 5)
    per_position = [
        (s.labels["position"], s.value)
        for f in text_string_to_metric_families(series.render({}))
        for s in f.samples
        if s.name == "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
    ]
    assert per_position == [("0", 2), ("1", 2), ("2", 1), ("3", 0), ("4", 0)]
    got = values(series.render({}))
    assert got["llamacpp:spec_decode_num_draft_tokens_total"] == 7
    assert got["llamacpp:spec_decode_num_accepted_tokens_total"] == 5
    assert got["llamacpp:spec_decode_num_drafts_total"] == 2


def test_throughputs_average_what_ran_since_the_previous_render() -> None:
    series, stats = LlamaServerSeries(), DecodeStats()
    series.track("a", stats)
    stats.decoded(busy=1, longest=8, prompt_tokens=8, seconds=0.5)
    stats.ended(5, 0.5)  # 4 steps after the first token
    got = values(series.render({}))
    assert got["llamacpp:prompt_tokens_seconds"] == 16 and got["llamacpp:predicted_tokens_seconds"] == 8
    assert values(series.render({}))["llamacpp:predicted_tokens_seconds"] == 0
