"""llama.cpp's native routes through a real server on SmolLM2: /completion (and /completions), /tokenize,
/detokenize, /props, /slots, /metrics, in llama-server's shapes, and bad input in llama-server's error shape."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.app.server.conftest import Server
from tests.capital_answer import CAPITAL_GRAMMAR

pytestmark = pytest.mark.model

PROMPT = "The capital of France is Paris. The capital of Germany is"
# The model's free greedy text differs between CPUs: where a test checks what it answered, the answer is one of a few
# capitals (tests/capital_answer.py), then words it copies, so a count of tokens ends inside the text on any CPU.
CAPITAL_THEN_MORE = CAPITAL_GRAMMAR + ' ". The capital of Italy is Rome."'


def post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=120)


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The SSE events of a whole streamed answer, each checked to be one ``data: {json}`` line."""
    out = []
    for block in response.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            out.append(json.loads(block[len("data: ") :]))
    return out


def assert_llamacpp_error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == status and error["type"] == kind and error["message"], error
    return error


def metric(text: str, sample: str, **labels: str) -> float:
    """The value of ``sample`` (``localinfer_requests_total``...) with ``labels`` in Prometheus text; 0 if absent."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


# --- /completion ----------------------------------------------------------------------------------------------


def test_completion_continues_the_prompt_with_counts(smollm2_server: Server, model_name: str) -> None:
    forced = {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "grammar": CAPITAL_THEN_MORE}
    reply = post(smollm2_server, "/completion", forced)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["content"].startswith(" Berlin.")
    assert body["stop"] is True and body["model"] == model_name
    assert body["tokens_predicted"] == 4 and body["stop_type"] == "limit" and body["stopping_word"] == ""
    assert body["tokens_evaluated"] > 10
    assert body["tokens_cached"] == body["tokens_evaluated"] + body["tokens_predicted"] - 1  # the last is not fed
    assert body["timings"]["predicted_n"] == 4 and body["timings"]["prompt_n"] + body["timings"]["cache_n"] > 10
    assert body["generation_settings"]["n_predict"] == 4 and body["generation_settings"]["n_ctx"] == 2048
    assert body["prompt"] == PROMPT
    # the same engine answers OpenAI's route with the same greedy text
    openai = post(
        smollm2_server,
        "/v1/completions",
        {"model": model_name, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "grammar": CAPITAL_THEN_MORE},
    )
    assert openai.json()["choices"][0]["text"] == body["content"]


def test_completions_alias_answers_the_same(smollm2_server: Server) -> None:
    body = {"prompt": PROMPT, "n_predict": 4, "temperature": 0}
    first = post(smollm2_server, "/completion", body).json()
    second = post(smollm2_server, "/completions", body).json()
    assert second["content"] == first["content"] and second["tokens_predicted"] == 4


def test_stream_is_data_lines_without_done_and_matches_the_whole(smollm2_server: Server) -> None:
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "ignore_eos": True}
    whole = post(smollm2_server, "/completion", body).json()
    streamed = post(smollm2_server, "/completion", {**body, "stream": True})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert "[DONE]" not in streamed.text
    lines = events(streamed)
    assert all(e["stop"] is False for e in lines[:-1]) and lines[-1]["stop"] is True
    assert "".join(e["content"] for e in lines) == whole["content"]
    assert lines[-1]["tokens_predicted"] == 12 and lines[-1]["stop_type"] == "limit"
    assert lines[-1]["generation_settings"]["stream"] is True


def test_a_stop_word_ends_the_text_before_it(smollm2_server: Server) -> None:
    forced = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "grammar": CAPITAL_THEN_MORE, "stop": ["Berlin"]}
    body = post(smollm2_server, "/completion", forced).json()
    assert body["stop_type"] == "word" and body["stopping_word"] == "Berlin"
    assert body["content"] == " "


def test_a_token_array_prompt_gives_the_same_text(smollm2_server: Server) -> None:
    tokens = post(smollm2_server, "/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    by_text = post(smollm2_server, "/completion", {"prompt": PROMPT, "n_predict": 6, "temperature": 0}).json()
    by_ids = post(smollm2_server, "/completion", {"prompt": tokens, "n_predict": 6, "temperature": 0}).json()
    assert by_ids["content"] == by_text["content"] and by_ids["tokens_evaluated"] == len(tokens)
    assert by_ids["prompt"] == PROMPT
    mixed = post(
        smollm2_server,
        "/completion",
        {
            "prompt": [PROMPT[:20], *post(smollm2_server, "/tokenize", {"content": PROMPT[20:]}).json()["tokens"]],
            "n_predict": 6,
            "temperature": 0,
        },
    )
    assert mixed.status_code == 200 and mixed.json()["tokens_evaluated"] > 10


def test_n_predict_zero_warms_the_cache_for_the_next_request(smollm2_server: Server) -> None:
    prompt = "A list of prime numbers, written out in words: two, three, five, seven, eleven,"
    warm = post(smollm2_server, "/completion", {"prompt": prompt, "n_predict": 0}).json()
    assert warm["content"] == "" and warm["tokens_predicted"] == 0 and warm["tokens_evaluated"] > 10
    after = post(smollm2_server, "/completion", {"prompt": prompt + " thirteen,", "n_predict": 2}).json()
    assert after["timings"]["cache_n"] >= warm["tokens_evaluated"] - 1


def test_continue_llamacpp_provider_body_streams_content(smollm2_server: Server) -> None:
    """The body Continue's llama.cpp provider sends (continuedev/continue core/llm/llms/LlamaCpp.ts,
    ``_streamComplete`` and ``_convertArgs``; undefined options are dropped by JSON.stringify), with the
    ``Authorization: Bearer undefined`` it sends when no key is set; it yields each event's ``content``."""
    body = {
        "prompt": PROMPT,
        "stream": True,
        "n_predict": 8,
        "frequency_penalty": 0,
        "presence_penalty": 0,
        "min_p": 0.05,
        "stop": ["\n\n"],
        "top_k": 40,
        "top_p": 0.95,
        "temperature": 0,
    }
    reply = httpx.post(
        f"{smollm2_server.url}/completion", json=body, headers={"Authorization": "Bearer undefined"}, timeout=120
    )
    assert reply.status_code == 200, reply.text
    # the greedy continuation of the prompt (the same server's, so the same on any CPU), streamed
    greedy = post(smollm2_server, "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "stop": ["\n\n"]})
    streamed = "".join(e.get("content", "") for e in events(reply))
    assert streamed == greedy.json()["content"] and streamed.strip()


# --- /tokenize, /detokenize ------------------------------------------------------------------------------------


def test_tokenize_detokenize_round_trip(smollm2_server: Server) -> None:
    text = "héllo wörld, 你好 🙂 def f(x):\n\treturn x"
    tokens = post(smollm2_server, "/tokenize", {"content": text}).json()["tokens"]
    assert len(tokens) > 5 and all(isinstance(t, int) for t in tokens)
    assert post(smollm2_server, "/detokenize", {"tokens": tokens}).json() == {"content": text}
    pieces = post(smollm2_server, "/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == tokens
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert joined.decode() == text


def test_control_tokens_are_parsed_only_when_asked(smollm2_server: Server) -> None:
    parsed = post(smollm2_server, "/tokenize", {"content": "<|im_start|>"}).json()["tokens"]
    literal = post(smollm2_server, "/tokenize", {"content": "<|im_start|>", "parse_special": False}).json()["tokens"]
    assert len(parsed) == 1 and len(literal) > 1


def test_out_of_range_token_ids_are_refused_and_the_server_keeps_serving(smollm2_server: Server) -> None:
    n_vocab = 49152  # SmolLM2's vocabulary; the error names the range
    error = assert_llamacpp_error(
        post(smollm2_server, "/detokenize", {"tokens": [1, n_vocab + 5]}), 400, "invalid_request_error"
    )
    assert str(n_vocab + 5) in error["message"] and str(n_vocab - 1) in error["message"]
    assert_llamacpp_error(post(smollm2_server, "/detokenize", {"tokens": [-1]}), 400, "invalid_request_error")
    assert_llamacpp_error(
        post(smollm2_server, "/completion", {"prompt": [1, 2, 10**9], "n_predict": 2}), 400, "invalid_request_error"
    )
    assert_llamacpp_error(
        post(smollm2_server, "/tokenize", {"content": [5, 2**40], "with_pieces": True}), 400, "invalid_request_error"
    )
    assert httpx.get(f"{smollm2_server.url}/health", timeout=30).status_code == 200
    forced = {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "grammar": CAPITAL_GRAMMAR}
    assert post(smollm2_server, "/completion", forced).json()["content"] == " Berlin"


# --- /props, /slots --------------------------------------------------------------------------------------------


def test_props_tell_the_loaded_context_and_name_never_a_path(smollm2_server: Server, model_name: str) -> None:
    props = httpx.get(f"{smollm2_server.url}/props", timeout=60).json()
    assert props["default_generation_settings"]["n_ctx"] == 2048
    assert props["model_path"] == model_name and props["model_alias"] == model_name
    assert not props["model_path"].endswith(".gguf")
    assert "<|im_start|>" in props["chat_template"]
    slots = httpx.get(f"{smollm2_server.url}/slots", timeout=60).json()
    assert props["total_slots"] == len(slots) >= 1
    assert props["build_info"].startswith("localinfer")
    assert httpx.get(f"{smollm2_server.url}/slots?fail_on_no_slot=1", timeout=60).status_code == 200


def test_slots_show_a_busy_slot_while_a_stream_runs(smollm2_server: Server, model_name: str) -> None:
    started = threading.Event()
    body = {"prompt": "Count: one, two, three,", "n_predict": 300, "ignore_eos": True, "stream": True}

    def stream() -> None:
        with httpx.stream("POST", f"{smollm2_server.url}/completion", json=body, timeout=300) as reply:
            for _ in reply.iter_lines():
                started.set()

    runner = threading.Thread(target=stream)
    runner.start()
    try:
        assert started.wait(120)
        slots = httpx.get(f"{smollm2_server.url}/slots", timeout=60).json()
        busy = [s for s in slots if s["is_processing"]]
        assert len(busy) == 1 and busy[0]["n_ctx"] == 2048 and busy[0]["next_token"][0]["n_decoded"] >= 1
        scraped = httpx.get(f"{smollm2_server.url}/metrics", timeout=60).text
        assert metric(scraped, "localinfer_slots_busy", model=model_name) == 1
    finally:
        runner.join(300)
    assert not any(s["is_processing"] for s in httpx.get(f"{smollm2_server.url}/slots", timeout=60).json())


# --- /metrics --------------------------------------------------------------------------------------------------


def test_metrics_counters_move_after_a_request(smollm2_server: Server, model_name: str) -> None:
    before = httpx.get(f"{smollm2_server.url}/metrics", timeout=60).text
    body = post(smollm2_server, "/completion", {"prompt": PROMPT, "n_predict": 5, "ignore_eos": True}).json()
    after = httpx.get(f"{smollm2_server.url}/metrics", timeout=60).text
    model = {"model": model_name}
    requests = {**model, "route": "/completion", "outcome": "length"}
    assert (
        metric(after, "localinfer_requests_total", **requests)
        == metric(before, "localinfer_requests_total", **requests) + 1
    )
    for sample, grew in (
        ("localinfer_generated_tokens_total", 5),
        ("localinfer_prompt_tokens_total", body["tokens_evaluated"]),
        ("localinfer_time_to_first_token_seconds_count", 1),
        ("localinfer_time_per_output_token_seconds_count", 4),
    ):
        assert metric(after, sample, **model) - metric(before, sample, **model) >= grew, sample
    assert metric(after, "localinfer_slots", **model) >= 1
    assert (
        metric(after, "localinfer_slots_busy", **model) == 0
        and metric(after, "localinfer_requests_waiting", **model) == 0
    )


def test_metrics_count_other_dialects_under_their_route(smollm2_server: Server, model_name: str) -> None:
    labels = {"model": model_name, "route": "/v1/chat/completions", "outcome": "length"}
    before = metric(httpx.get(f"{smollm2_server.url}/metrics", timeout=60).text, "localinfer_requests_total", **labels)
    post(
        smollm2_server,
        "/v1/chat/completions",
        {"model": model_name, "max_tokens": 2, "ignore_eos": True, "messages": [{"role": "user", "content": "Hi"}]},
    )
    after = metric(httpx.get(f"{smollm2_server.url}/metrics", timeout=60).text, "localinfer_requests_total", **labels)
    assert after == before + 1


# --- bad input -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {},  # no prompt
        {"prompt": 5},
        {"prompt": {"text": "x"}},
        {"prompt": "x", "n_predict": "many"},
        {"prompt": "x", "n_predict": -2},
        {"prompt": "x", "temperature": "hot"},
        {"prompt": "x", "top_p": 2},
        {"prompt": "x", "stop": [1, 2]},
        {"prompt": "x", "stream": "yes please"},
        {"prompt": "x", "model": 7},
        {"prompt": []},  # no prompt at all
        {"prompt": ["one", 5.5]},
        {"prompt": [True, 5]},  # a token id is a JSON integer
        {"prompt": [1.0, 2]},
        {"prompt": ""},
    ],
)
def test_bad_completion_bodies_are_400s_in_llamacpp_shape(smollm2_server: Server, body: dict[str, Any]) -> None:
    assert_llamacpp_error(post(smollm2_server, "/completion", body), 400, "invalid_request_error")


@pytest.mark.parametrize(
    "field,value",
    [
        ("mirostat", 2),
        ("samplers", ["mirostat"]),
        ("typical_p", 0.5),
    ],
)
def test_a_field_we_cannot_honour_is_a_400_naming_it(smollm2_server: Server, field: str, value: Any) -> None:
    error = assert_llamacpp_error(
        post(smollm2_server, "/completion", {"prompt": "x", field: value}), 400, "invalid_request_error"
    )
    assert field in error["message"] or str(value[0]) in error["message"]


def test_a_prompt_past_the_context_is_a_400_with_the_numbers(smollm2_server: Server) -> None:
    error = assert_llamacpp_error(
        post(smollm2_server, "/completion", {"prompt": "word " * 3000, "n_predict": 1}),
        400,
        "exceed_context_size_error",
    )
    assert error["n_ctx"] == 2048 and error["n_prompt_tokens"] >= 2048


def test_an_unknown_model_is_a_404_not_found(smollm2_server: Server) -> None:
    assert_llamacpp_error(
        post(smollm2_server, "/completion", {"prompt": "x", "model": "no-such-model"}), 404, "not_found_error"
    )
    assert_llamacpp_error(
        httpx.get(f"{smollm2_server.url}/props?model=no-such-model", timeout=30), 404, "not_found_error"
    )


@pytest.mark.parametrize(
    "path,body",
    [
        ("/tokenize", {}),
        ("/tokenize", {"content": 5}),
        ("/detokenize", {}),
        ("/detokenize", {"tokens": "1 2"}),
        ("/detokenize", {"tokens": [1.5]}),
    ],
)
def test_bad_tokenizer_bodies_are_400s_in_llamacpp_shape(smollm2_server: Server, path: str, body: Any) -> None:
    assert_llamacpp_error(post(smollm2_server, path, body), 400, "invalid_request_error")


def test_a_body_that_is_not_json_is_a_400_in_llamacpp_shape(smollm2_server: Server) -> None:
    reply = httpx.post(f"{smollm2_server.url}/completion", content=b"{not json", timeout=30)
    assert_llamacpp_error(reply, 400, "invalid_request_error")


def test_extreme_but_valid_sampling_values_are_served(smollm2_server: Server) -> None:
    """llama-server bounds none of these; nor do we, and none may crash the sampler (float32 makes 1e308 infinite)."""
    extremes: list[dict[str, Any]] = [
        {"temperature": 1e308},
        {"repeat_penalty": 1e308, "repeat_last_n": -1},
        {"presence_penalty": 1e308, "frequency_penalty": -1e308},
        {"top_p": 0.0, "min_p": 1.0},
        {"seed": 2**64 - 1},
        {"samplers": []},
    ]
    for extreme in extremes:
        reply = post(smollm2_server, "/completion", {"prompt": PROMPT, "n_predict": 3, **extreme})
        assert reply.status_code == 200, (extreme, reply.text)
        assert reply.json()["tokens_predicted"] <= 3
    assert httpx.get(f"{smollm2_server.url}/health", timeout=30).status_code == 200
