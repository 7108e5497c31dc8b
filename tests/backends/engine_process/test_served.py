"""A Hugging Face (safetensors) folder served through localinfer's server by its vLLM backend, with stand-in engines
started as ``vllm serve`` would be: OpenAI requests relayed as they are, refusals answered by the app."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from localinfer.app.server.app import create_app
from localinfer.backends.engine_process.engines import VllmBackend
from localinfer.backends.engine_process.recipes.vllm import VLLM
from localinfer.backends.registry import DEFAULT_BACKENDS
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.store import ModelStore, hf_manifest
from tests.app.server.test_llamacpp_routes import metric
from tests.backends.engine_process.conftest import group_members, serving_app, standin_env
from tests.backends.engine_process.standins import install_standin
from tests.capital_answer import CAPITAL_FORMAT, capital_in
from tests.hf_folder import write_hf_folder

NAME = "org/tiny-hf"
KEY = "server-key"

# An OpenAI-shaped engine that answers each POST with what it received: path, body (as text) and Authorization;
# streamed (two events, then [DONE]) when the body asks for a stream. Serves its --served-model-name.
ECHO_ENGINE = """
import http.server, json, os, sys
args = sys.argv[1:]
port, key = int(args[args.index("--port") + 1]), os.environ["VLLM_API_KEY"]
name = args[args.index("--served-model-name") + 1]

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, data, kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Engine", "echo")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(200, json.dumps({"object": "list", "data": [{"id": name, "max_model_len": 2048}]}).encode())

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        seen = {"path": self.path, "body": body, "authorization": self.headers.get("Authorization")}
        if json.loads(body).get("stream"):
            events = [json.dumps({"seen": seen, "n": i}) for i in range(2)] + ["[DONE]"]
            self.reply(200, "".join(f"data: {e}\\n\\n" for e in events).encode(), "text/event-stream")
        else:
            self.reply(200, json.dumps({"seen": seen}).encode())

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def served_engine(tmp_path: Path, backend: VllmBackend, engine_args: list[str]) -> Engine:
    """An engine whose models in a store under ``tmp_path`` include the folder, registered as NAME."""
    store = ModelStore(tmp_path / "models")
    store.register(hf_manifest(write_hf_folder(tmp_path / "tiny-hf"), name=NAME))
    settings = Settings(home=tmp_path, discover=False, engine_args=engine_args)
    return Engine(settings, store, {**DEFAULT_BACKENDS, "hf": lambda: backend})


@pytest.fixture
def echo_server(tmp_path: Path) -> Iterator[tuple[str, VllmBackend]]:
    """localinfer's server (key KEY) with NAME served by the echo engine; yields its URL and the backend."""
    script = tmp_path / "echo_engine.py"
    script.write_text(ECHO_ENGINE)
    echo = dataclasses.replace(VLLM, command=lambda: [sys.executable, str(script)])
    backend = VllmBackend(recipe=echo, log_dir=tmp_path, stop_grace=2)
    engine = served_engine(tmp_path, backend, ["--enforce-eager"])
    with serving_app(create_app(engine, api_key=KEY)) as url:
        yield url, backend


def test_a_chat_request_reaches_the_engine_as_sent_and_its_answer_comes_back_as_sent(
    echo_server: tuple[str, VllmBackend],
) -> None:
    url, backend = echo_server
    body = b'{"model": "org/tiny-hf", "messages": [{"role": "user", "content": "hi"}], "guided_choice": ["a", "b"]}'
    answer = httpx.post(f"{url}/v1/chat/completions", content=body, headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200
    assert answer.headers["x-engine"] == "echo"
    seen = answer.json()["seen"]
    assert seen["path"] == "/v1/chat/completions"
    assert seen["body"] == body.decode()  # vLLM-only fields pass: nothing was parsed or rewritten
    assert backend.process is not None
    assert seen["authorization"] == f"Bearer {backend.process.api_key}"  # the engine's key, not the client's
    assert "--served-model-name" in backend.process.argv and NAME in backend.process.argv
    assert "--enforce-eager" in backend.process.argv  # the engine_args setting reached it


def test_a_streamed_answer_is_relayed_event_by_event(echo_server: tuple[str, VllmBackend]) -> None:
    url, _ = echo_server
    body = {"model": NAME, "prompt": "x", "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}) as answer:
        raw = b"".join(answer.iter_raw())
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [e for e in raw.split(b"\n\n") if e]
    assert [json.loads(e[6:])["n"] for e in events[:-1]] == [0, 1]
    assert events[-1] == b"data: [DONE]"
    assert json.loads(events[0][6:])["seen"]["path"] == "/v1/completions"


def test_a_request_without_the_key_is_refused_before_the_engine_starts(echo_server: tuple[str, VllmBackend]) -> None:
    url, backend = echo_server
    answer = httpx.post(f"{url}/v1/chat/completions", json={"model": NAME, "messages": []})
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "authentication_error"
    assert backend.process is None


def test_other_models_and_bad_bodies_still_get_the_apps_answers(echo_server: tuple[str, VllmBackend]) -> None:
    url, backend = echo_server
    auth = {"Authorization": f"Bearer {KEY}"}
    chat = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
    missing = httpx.post(f"{url}/v1/chat/completions", json=chat, headers=auth)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    broken = httpx.post(
        f"{url}/v1/chat/completions", content=b"{not json", headers={**auth, "Content-Type": "application/json"}
    )
    assert broken.status_code == 400
    assert broken.json()["error"]["message"].startswith("the request body is not valid JSON: ")
    assert backend.process is None


@pytest.mark.model
def test_clients_chat_with_a_folder_model_through_a_localinfer_standin_engine(
    smollm2_gguf: Path, tmp_path: Path
) -> None:
    # `python -m vllm.entrypoints.openai.api_server` is the stand-in, which serves SmolLM2 in the folder's stead
    env = standin_env(tmp_path, **install_standin("vllm", tmp_path), STANDIN_GGUF=str(smollm2_gguf))
    backend = VllmBackend(log_dir=tmp_path, env=env, stop_grace=5)
    engine = served_engine(tmp_path, backend, [])
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What is the capital city of France? Answer in one word."}
    ]
    with serving_app(create_app(engine)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        # the answer held to a choice of capitals as JSON (tests/capital_answer.py): greedy text differs between CPUs
        whole = client.chat.completions.create(
            model=NAME, messages=messages, max_tokens=24, temperature=0, response_format=CAPITAL_FORMAT
        )
        assert whole.model == NAME
        assert capital_in(whole.choices[0].message.content) == "Paris"
        stream = client.chat.completions.create(
            model=NAME,
            messages=messages,
            max_tokens=24,
            temperature=0,
            response_format=CAPITAL_FORMAT,
            stream=True,
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert streamed == whole.choices[0].message.content
        assert NAME in [m.id for m in client.models.list()]
        assert backend.process is not None
        pid = backend.process.pid or 0
    assert not group_members(pid)  # the server's shutdown stopped the engine


def test_serving_a_folder_model_on_a_machine_without_vllm_fails_in_one_line(tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "tiny-hf")
    env = {**os.environ, "LOCALINFER_HOME": str(tmp_path / "home"), "LOCALINFER_CONFIG": str(tmp_path / "none.toml")}
    done = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "serve", str(folder), "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("localinfer: tiny-hf needs vLLM"), done.stderr
    assert "Traceback" not in done.stderr
    assert any("convert the model to ONNX" in line for line in lines)


@pytest.mark.model
def test_relayed_requests_are_counted_in_metrics_by_route_outcome_and_the_engines_usage(
    smollm2_gguf: Path, tmp_path: Path
) -> None:
    env = standin_env(tmp_path, **install_standin("vllm", tmp_path), STANDIN_GGUF=str(smollm2_gguf))
    backend = VllmBackend(log_dir=tmp_path, env=env, stop_grace=5)
    with serving_app(create_app(served_engine(tmp_path, backend, []))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        stream = client.completions.create(
            model=NAME,
            prompt="Once upon a time",
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        streamed_usage = [c.usage for c in stream if c.usage][-1]
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
        chat = client.chat.completions.create(model=NAME, messages=messages, max_tokens=4, temperature=0)
        refused = httpx.post(f"{url}/v1/completions", json={"model": NAME, "prompt": "Hi", "max_tokens": -1})
        metrics = httpx.get(f"{url}/metrics").text
    assert refused.status_code == 400
    assert streamed_usage.completion_tokens == 6
    assert chat.usage is not None and chat.choices[0].finish_reason in ("stop", "length")
    requests = "localinfer_requests_total"
    assert metric(metrics, requests, model=NAME, route="/v1/completions", outcome="length") == 1
    assert (
        metric(metrics, requests, model=NAME, route="/v1/chat/completions", outcome=chat.choices[0].finish_reason) == 1
    )
    assert metric(metrics, requests, model=NAME, route="/v1/completions", outcome="invalid_request") == 1
    generated = streamed_usage.completion_tokens + chat.usage.completion_tokens
    assert metric(metrics, "localinfer_generated_tokens_total", model=NAME) == generated
    prompt = streamed_usage.prompt_tokens + chat.usage.prompt_tokens
    assert metric(metrics, "localinfer_prompt_tokens_total", model=NAME) == prompt
    # the first token's time is seen in a stream only: a whole JSON answer comes at once
    assert metric(metrics, "localinfer_time_to_first_token_seconds_count", model=NAME) == 1


def test_relayed_requests_are_counted_by_the_route_they_matched_however_the_client_spelled_it(
    echo_server: tuple[str, VllmBackend],
) -> None:
    url, _ = echo_server
    auth = {"Authorization": f"Bearer {KEY}"}
    body = {"model": NAME, "messages": [{"role": "user", "content": "hi"}]}
    for path in ("/v1/chat/completions", "/v1/chat/c%6fmpletions", "/v1/chat/c%6Fmpletions"):
        answer = httpx.post(f"{url}{path}", json=body, headers=auth)
        assert (answer.status_code, answer.json()["seen"]["path"]) == (200, path)  # relayed as sent
    metrics = httpx.get(f"{url}/metrics", headers=auth).text
    routes = {
        s.labels["route"]
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "localinfer_requests_total" and s.labels["model"] == NAME
    }
    assert routes == {"/v1/chat/completions"}
    assert metric(metrics, "localinfer_requests_total", model=NAME, route="/v1/chat/completions", outcome="stop") == 3


@pytest.mark.model
def test_relayed_responses_api_answers_are_counted_with_their_outcome_first_token_and_usage(
    smollm2_gguf: Path, tmp_path: Path
) -> None:
    env = standin_env(tmp_path, **install_standin("vllm", tmp_path), STANDIN_GGUF=str(smollm2_gguf))
    backend = VllmBackend(log_dir=tmp_path, env=env, stop_grace=5)
    with serving_app(create_app(served_engine(tmp_path, backend, []))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        whole = client.responses.create(model=NAME, input="Say hello.", max_output_tokens=4, temperature=0)
        stream = client.responses.create(
            model=NAME, input="Once upon a time", max_output_tokens=6, temperature=0, stream=True
        )
        streamed = [e.response for e in stream if e.type in ("response.completed", "response.incomplete")][-1]
        metrics = httpx.get(f"{url}/metrics").text
    assert whole.usage is not None and streamed.usage is not None
    outcomes = Counter({"completed": "stop", "incomplete": "length"}[r.status or ""] for r in (whole, streamed))
    requests = "localinfer_requests_total"
    for outcome in ("stop", "length", "error"):
        assert metric(metrics, requests, model=NAME, route="/v1/responses", outcome=outcome) == outcomes[outcome]
    generated = whole.usage.output_tokens + streamed.usage.output_tokens
    assert metric(metrics, "localinfer_generated_tokens_total", model=NAME) == generated
    prompt = whole.usage.input_tokens + streamed.usage.input_tokens
    assert metric(metrics, "localinfer_prompt_tokens_total", model=NAME) == prompt
    assert metric(metrics, "localinfer_time_to_first_token_seconds_count", model=NAME) == 1  # the stream's
