"""What a request asks of onnxruntime-genai: a KV buffer sized for that request, and its sampling."""

from __future__ import annotations

from localinfer.backends.onnx.job import guidance, search_options
from localinfer.types import GenerationOptions, ResponseFormat, SamplingParams


def test_max_length_is_the_prompt_plus_max_tokens_not_the_whole_context() -> None:
    assert search_options(GenerationOptions(max_tokens=50), 30, 8192)["max_length"] == 80


def test_max_length_is_capped_by_the_context_and_is_the_context_without_max_tokens() -> None:
    assert search_options(GenerationOptions(max_tokens=5000), 4000, 8192)["max_length"] == 8192
    assert search_options(GenerationOptions(), 30, 2048)["max_length"] == 2048


def test_a_sliding_window_model_gets_at_least_its_window() -> None:
    assert search_options(GenerationOptions(max_tokens=10), 20, 8192, window=512)["max_length"] == 512


def test_temperature_zero_is_greedy() -> None:
    search = search_options(GenerationOptions(sampling=SamplingParams(temperature=0, seed=3)), 10, 100)
    assert search["do_sample"] is False and "temperature" not in search and "random_seed" not in search


def test_sampling_passes_temperature_top_p_top_k_seed_and_repeat_penalty() -> None:
    sampling = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, seed=42, repeat_penalty=1.1)
    search = search_options(GenerationOptions(sampling=sampling), 10, 100)
    assert {k: search[k] for k in ("do_sample", "temperature", "top_p", "top_k", "random_seed")} == {
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 0,
        "random_seed": 42,
    }
    assert search["repetition_penalty"] == 1.1


def test_ignore_eos_holds_generation_to_max_length() -> None:
    search = search_options(GenerationOptions(max_tokens=8, ignore_eos=True), 10, 100)
    assert search["min_length"] == search["max_length"] == 18


def test_json_formats_become_guidance() -> None:
    assert guidance(ResponseFormat()) is None
    assert guidance(ResponseFormat("json_object")) == ("json_schema", '{"type": "object"}')
    assert guidance(ResponseFormat("json_schema", {"type": "array"})) == ("json_schema", '{"type": "array"}')
