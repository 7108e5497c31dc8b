"""/metrics exports llama-server's ``llamacpp:*`` series beside localinfer's own, with llama-server's names, types and
meaning: the same requests sent to llama-server (``--metrics``) and to ``localinfer serve`` on SmolLM2 move the
counters by the same amounts, and each gauge means what llama-server's does.

Both run one slot of 2048 tokens with flash attention (localinfer's default, where llama-server's leaves it off on a
CPU: the same arithmetic, so the same greedy reply), localinfer without speculative decoding (llama-server
speculates only when told to), so that each generated token after the first costs one decode on both.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

PROMPT = "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is"
OTHER = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
CHAT = (  # SmolLM2's template, rendered: the greedy reply is "The answer is 4." and its end-of-turn token
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2? Answer with one number.<|im_end|>\n<|im_start|>assistant\n"
)
# The second asks the first's prompt again: all but its last token come from the cache, on both servers. The last
# ends at the model's end-of-turn token, which llama-server counts as a token predicted: its text is held to this
# CPU's greedy reply (another CPU's may be another), after which the model ends it (0.64) rather than write the space
# the grammar also allows (a complete grammar would end localinfer's reply itself, without the end token).
REQUESTS: list[dict[str, Any]] = [
    {"prompt": PROMPT, "n_predict": 8, "ignore_eos": True},
    {"prompt": PROMPT, "n_predict": 4, "ignore_eos": True},
    {"prompt": OTHER, "n_predict": 6, "ignore_eos": True, "cache_prompt": False},
    {"prompt": CHAT, "n_predict": 24, "temperature": 0, "grammar": 'root ::= "The answer is 4." " "?'},
]
COUNTED = (  # the counters whose growth both must agree on exactly
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:n_decode_total",
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
    "llamacpp:spec_decode_num_drafts_total",
)


@dataclass(frozen=True)
class Scrape:
    types: dict[str, str]  # family name -> counter / gauge, for the llamacpp: families
    # sample name -> value, for the unlabelled llamacpp: samples (the parser names every counter's sample with
    # _total, llama-server's n_tokens_max too: llamacpp:n_tokens_max_total)
    values: dict[str, float]
    headers: httpx.Headers


def scrape(url: str, query: str = "") -> Scrape:
    reply = httpx.get(f"{url}/metrics{query}", timeout=120)
    assert reply.status_code == 200, reply.text
    types, values = {}, {}
    for family in text_string_to_metric_families(reply.text):
        if family.name.startswith("llamacpp:"):
            types[family.name] = family.type
            values.update({s.name: float(s.value) for s in family.samples if not s.labels})
    return Scrape(types, values, reply.headers)


def complete(url: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(f"{url}/completion", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


@dataclass(frozen=True)
class Run:
    """One server's scrapes around REQUESTS, and its answers to them."""

    url: str
    before: Scrape
    after: Scrape
    answers: list[dict[str, Any]]

    def grew(self, sample: str) -> float:
        return self.after.values[sample] - self.before.values[sample]


def run_requests(url: str) -> Run:
    before = scrape(url)
    answers = [complete(url, body) for body in REQUESTS]
    return Run(url, before, scrape(url), answers)


@pytest.fixture(scope="module")
def llama(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(
        smollm2.path, tmp_path_factory.mktemp("llama-server"), "--metrics", "-c", "2048", "-np", "1", "-fa", "on"
    ) as url:
        yield url


@pytest.fixture(scope="module")
def ours(smollm2: Manifest, test_home: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log_dir = tmp_path_factory.mktemp("serve-metrics")
    with serving(smollm2.name, test_home, log_dir, "--ctx-size", "2048", "-np", "1", "--spec", "off") as server:
        yield server


@pytest.fixture(scope="module")
def runs(llama: str, ours: Server) -> tuple[Run, Run]:
    """REQUESTS on llama-server, then on localinfer, each between two scrapes."""
    return run_requests(llama), run_requests(ours.url)


# --- the series ------------------------------------------------------------------------------------------------


def test_every_llamacpp_series_llama_server_exports_is_exported_with_its_type(runs: tuple[Run, Run]) -> None:
    theirs, ours = runs
    assert len(theirs.after.types) >= 15, theirs.after.types  # what this llama-server version exports
    missing = {name: kind for name, kind in theirs.after.types.items() if ours.after.types.get(name) != kind}
    assert not missing, f"llama-server exports these, localinfer not (or not as that type): {missing}"
    assert set(theirs.after.values) <= set(ours.after.values)


def test_token_counters_grow_as_llama_servers_do_after_the_same_requests(runs: tuple[Run, Run]) -> None:
    theirs, ours = runs
    assert theirs.answers[-1]["stop_type"] == "eos", theirs.answers[-1]
    assert {s: ours.grew(s) for s in COUNTED} == {s: theirs.grew(s) for s in COUNTED}
    # what they count, as llama-server's answers state it
    assert theirs.grew("llamacpp:tokens_predicted_total") == sum(a["tokens_predicted"] for a in theirs.answers)
    assert theirs.grew("llamacpp:prompt_tokens_total") == sum(a["timings"]["prompt_n"] for a in theirs.answers)
    assert theirs.grew("llamacpp:prompt_tokens_cached_total") == sum(a["timings"]["cache_n"] for a in theirs.answers)
    assert theirs.grew("llamacpp:prompt_tokens_cached_total") == theirs.answers[0]["tokens_evaluated"] - 1
    for run in runs:  # one decode per prompt, then one per token after each request's first
        assert run.grew("llamacpp:n_decode_total") == run.grew("llamacpp:tokens_predicted_total"), run.url
        assert run.grew("llamacpp:spec_decode_num_drafts_total") == 0, run.url


def test_n_tokens_max_is_the_longest_sequence_computed_as_llama_servers_is(runs: tuple[Run, Run]) -> None:
    theirs, ours = runs
    assert ours.after.values["llamacpp:n_tokens_max_total"] == theirs.after.values["llamacpp:n_tokens_max_total"]
    longest = max(a["tokens_evaluated"] + a["tokens_predicted"] - 1 for a in theirs.answers)
    assert theirs.after.values["llamacpp:n_tokens_max_total"] == longest  # the last token is sampled, not decoded


def test_one_request_at_a_time_keeps_one_busy_slot_per_decode(runs: tuple[Run, Run]) -> None:
    for run in runs:
        assert run.after.values["llamacpp:n_busy_slots_per_decode"] == 1.0
        assert run.after.values["llamacpp:requests_processing"] == 0
        assert run.after.values["llamacpp:requests_deferred"] == 0


def test_throughput_gauges_average_the_requests_since_the_last_scrape(runs: tuple[Run, Run]) -> None:
    for run in runs:
        prompt_seconds = run.grew("llamacpp:prompt_seconds_total")
        predicted_seconds = run.grew("llamacpp:tokens_predicted_seconds_total")
        assert prompt_seconds > 0 and predicted_seconds > 0, run.url
        # llama-server's rate counts decode steps: each request's first token comes with its prompt, free
        steps = run.grew("llamacpp:tokens_predicted_total") - len(REQUESTS)
        assert run.after.values["llamacpp:predicted_tokens_seconds"] == pytest.approx(steps / predicted_seconds, 1e-4)
        prompt_tokens = run.grew("llamacpp:prompt_tokens_total")
        assert run.after.values["llamacpp:prompt_tokens_seconds"] == pytest.approx(prompt_tokens / prompt_seconds, 1e-4)


def test_throughput_gauges_are_zero_when_nothing_ran_since_the_last_scrape(llama: str, ours: Server) -> None:
    for url in (llama, ours.url):
        complete(url, {"prompt": PROMPT, "n_predict": 2, "ignore_eos": True})
        scrape(url)
        idle = scrape(url)
        assert idle.values["llamacpp:predicted_tokens_seconds"] == 0, url
        assert idle.values["llamacpp:prompt_tokens_seconds"] == 0, url


def scrape_while_one_streams_and_one_waits(url: str) -> Scrape:
    """A scrape taken while a stream holds the server's one slot and another request waits for it; the stream is
    then closed (the server cancels it) and the waiting request answered."""
    started, seen = threading.Event(), threading.Event()

    def stream() -> None:
        body = {"prompt": OTHER, "n_predict": 400, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{url}/completion", json=body, timeout=300) as reply:
            for _ in reply.iter_lines():
                started.set()
                if seen.is_set():
                    break

    first = threading.Thread(target=stream)
    waiting = threading.Thread(target=complete, args=(url, {"prompt": PROMPT, "n_predict": 1}))
    first.start()
    try:
        assert started.wait(120)
        waiting.start()
        scraped = scrape(url)
        while scraped.values["llamacpp:requests_deferred"] == 0 and first.is_alive():  # until the second queues
            scraped = scrape(url)
        return scraped
    finally:
        seen.set()
        first.join(300)
        if waiting.ident is not None:  # started
            waiting.join(300)


def test_requests_processing_and_deferred_count_a_busy_slot_and_a_waiting_request(llama: str, ours: Server) -> None:
    for url in (llama, ours.url):
        seen = scrape_while_one_streams_and_one_waits(url)
        assert seen.values["llamacpp:requests_processing"] == 1, url
        assert seen.values["llamacpp:requests_deferred"] == 1, url
        idle = scrape(url)
        assert idle.values["llamacpp:requests_processing"] == idle.values["llamacpp:requests_deferred"] == 0, url


def test_metrics_answers_carry_process_start_time_unix_as_llama_server(llama: str, ours: Server) -> None:
    for url in (llama, ours.url):
        first, second = scrape(url).headers, scrape(url).headers
        assert first["process-start-time-unix"].isdigit(), url
        assert first["process-start-time-unix"] == second["process-start-time-unix"], url


# --- several models: ?model= -----------------------------------------------------------------------------------


def test_model_query_gives_that_models_counters(runs: tuple[Run, Run], smollm2: Manifest) -> None:
    _, ours = runs
    everything, one = scrape(ours.url), scrape(ours.url, f"?model={smollm2.name}")
    assert {s: one.values[s] for s in COUNTED} == {s: everything.values[s] for s in COUNTED}


def test_model_query_naming_a_path_is_a_404(ours: Server) -> None:
    reply = httpx.get(f"{ours.url}/metrics", params={"model": "/etc/model.gguf"}, timeout=60)
    assert reply.status_code == 404, reply.text
    assert reply.json()["error"]["code"] == 404


# --- speculative decoding --------------------------------------------------------------------------------------


def test_draft_counters_count_prompt_lookups_drafts_and_each_kept_token_saves_a_decode(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    """Prompt lookup (the default) drafts a list the prompt holds; each draft token kept is a token generated
    without a decode of its own, and counts once at its place in its draft. On a server of its own: whether a draft
    pays is learnt from the steps a server has timed, so a long-lived server's history (a busy moment) could make
    it draft nothing."""
    text = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20"
    with serving(smollm2.name, test_home, tmp_path, "--ctx-size", "1024", "--parallel", "1") as server:
        before = scrape(server.url)
        body = {"prompt": f"Copy: {text}\nCopy: {text}\nCopy:", "n_predict": 48, "ignore_eos": True, "temperature": 0}
        answer = complete(server.url, body)
        reply = httpx.get(f"{server.url}/metrics", timeout=60).text
        after = scrape(server.url)  # no request between: the same counters

    def grew(sample: str) -> float:
        return after.values[sample] - before.values.get(sample, 0.0)

    accepted = grew("llamacpp:spec_decode_num_accepted_tokens_total")
    assert accepted >= answer["timings"]["draft_n_accepted"] > 0, answer["timings"]
    assert grew("llamacpp:spec_decode_num_draft_tokens_total") >= max(accepted, answer["timings"]["draft_n"])
    assert grew("llamacpp:spec_decode_num_drafts_total") > 0
    assert grew("llamacpp:tokens_predicted_total") == 48
    assert grew("llamacpp:n_decode_total") == 48 - accepted  # the prompt's decode gives the first token
    assert after.types["llamacpp:spec_decode_num_accepted_tokens_per_pos"] == "counter"
    per_position = [
        s.value
        for f in text_string_to_metric_families(reply)
        for s in f.samples
        if s.name == "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
    ]
    assert per_position and sum(per_position) == after.values["llamacpp:spec_decode_num_accepted_tokens_total"]
