"""Several models in one server, end to end (issue 15): a real `localinfer serve` with SmolLM2 and Gemma 3 270M,
the official ollama client and httpx. The scheduler's rules one by one, with fakes: tests/engine/test_scheduler.py.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest
import uvicorn

from localinfer.app.server.app import create_app
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.library import ModelLibrary, ServedModels
from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving

pytestmark = pytest.mark.model

CTX = ("--ctx-size", "1024", "--parallel", "2")  # 512 tokens a slot


def ask(server: Server, model: str, prompt: str, **extra: Any) -> str:
    body = {"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0, **extra}
    response = httpx.post(f"{server.url}/v1/completions", json=body, timeout=180)
    assert response.status_code == 200, response.text
    text: str = response.json()["choices"][0]["text"]
    return text


def running(server: Server) -> dict[str, dict[str, Any]]:
    """/api/ps: the loaded models by name, untagged."""
    models = httpx.get(f"{server.url}/api/ps", timeout=30).json()["models"]
    return {m["name"].removesuffix(":latest"): m for m in models}


@pytest.fixture(scope="module")
def one_at_a_time(
    smollm2: Manifest, gemma3: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("max-loaded-1"), *CTX, "--max-loaded", "1") as s:
        yield s


def test_with_max_loaded_1_alternating_clients_of_two_models_all_get_their_models_answers(
    one_at_a_time: Server, smollm2: Manifest, gemma3: Manifest
) -> None:
    prompts = {smollm2.name: "The capital of France is", gemma3.name: "Water boils at"}
    alone = {model: ask(one_at_a_time, model, prompt) for model, prompt in prompts.items()}
    assert alone[smollm2.name] != alone[gemma3.name]
    seen: list[int] = []
    answers: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def client(number: int) -> None:
        try:
            for turn in range(4):
                model = [smollm2.name, gemma3.name][(number + turn) % 2]
                answers.append((model, ask(one_at_a_time, model, prompts[model])))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def watch() -> None:
        while not done.is_set():
            seen.append(len(running(one_at_a_time)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    clients = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    done.set()
    watcher.join()
    assert not errors, errors
    assert len(answers) == 16 and all(text == alone[model] for model, text in answers)
    assert seen and max(seen) == 1  # never both in memory


@pytest.fixture(scope="module")
def roomy(smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(smollm2.name, test_home, tmp_path_factory.mktemp("roomy"), *CTX) as server:
        yield server


def test_with_room_for_both_both_stay_loaded_with_their_sizes(
    roomy: Server, smollm2: Manifest, gemma3: Manifest
) -> None:
    ask(roomy, smollm2.name, "Hello")
    ask(roomy, gemma3.name, "Hello")
    both = running(roomy)
    assert set(both) == {smollm2.name, gemma3.name}
    assert both[gemma3.name]["size"] > 0 and both[smollm2.name]["size"] > 0
    assert all(m["pinned"] is False for m in both.values())


class HandClock:
    """The engine's clock, moved by the test; ``moved_to`` returns once the engine's keep-alive task has looked at
    it since (the scheduler's reaper reads the clock first thing each round, then unloads what has expired)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._looked = asyncio.Event()

    def __call__(self) -> float:
        task = asyncio.current_task()
        if task is not None and task.get_name() == "keep-alive":
            self._looked.set()
        return self.now

    async def moved_to(self, now: float) -> None:
        self._looked.clear()
        self.now = now
        await self._looked.wait()


async def test_a_keep_alive_of_two_seconds_unloads_the_model_two_seconds_after_its_request(
    smollm2: Manifest, test_home: Path
) -> None:
    settings = Settings(home=test_home, discover=False, ctx_size=512, parallel=1)
    clock = HandClock()
    library = ModelLibrary.from_settings(settings)
    engine = Engine(settings, ServedModels(library), clock=clock)
    app = create_app(engine, client=LocalClient(engine, library, settings))
    listening = socket.create_server(("127.0.0.1", 0))  # connections queue here until uvicorn takes them
    url = f"http://127.0.0.1:{listening.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving_task = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        client = ollama.AsyncClient(host=url)
        await client.generate(model=smollm2.name, prompt="Hi", keep_alive="2s", options={"num_predict": 2})
        async with httpx.AsyncClient(timeout=30) as http:
            listed = {m["name"].removesuffix(":latest"): m for m in (await http.get(f"{url}/api/ps")).json()["models"]}
            expires = datetime.fromisoformat(listed[smollm2.name]["expires_at"].replace("Z", "+00:00"))
            assert 0 < (expires - datetime.now(timezone.utc)).total_seconds() <= 2.0  # 2 s by the engine's clock
            await clock.moved_to(1.9)
            assert [m["name"] for m in (await http.get(f"{url}/api/ps")).json()["models"]] == [f"{smollm2.name}:latest"]
            await clock.moved_to(2.0)
            assert (await http.get(f"{url}/api/ps")).json()["models"] == []  # unloaded at its time, not before
    finally:
        server.should_exit = True
        await serving_task
        listening.close()


def test_ollamas_keep_alive_zero_with_no_prompt_unloads_the_model(roomy: Server, gemma3: Manifest) -> None:
    client = ollama.Client(host=roomy.url)
    client.generate(model=gemma3.name, prompt="", keep_alive=-1)  # loads it, for good
    listed = running(roomy)[gemma3.name]
    assert datetime.fromisoformat(listed["expires_at"].replace("Z", "+00:00")).year > datetime.now().year + 10
    unloaded = client.generate(model=gemma3.name, prompt="", keep_alive=0)
    assert unloaded.done_reason == "unload"
    deadline = time.monotonic() + 30
    while gemma3.name in running(roomy):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_bad_keep_alive_is_a_400_naming_it(roomy: Server, smollm2: Manifest) -> None:
    body = {"model": smollm2.name, "prompt": "Hi", "stream": False, "keep_alive": "soon"}
    response = httpx.post(f"{roomy.url}/api/generate", json=body, timeout=60)
    assert response.status_code == 400 and "keep_alive" in response.json()["error"]
    openai_body = {"model": smollm2.name, "prompt": "Hi", "keep_alive": "forever"}
    response = httpx.post(f"{roomy.url}/v1/completions", json=openai_body, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "keep_alive"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_models_load_then_localinfer_ps_lists_it_and_localinfer_stop_unloads_it(
    roomy: Server, gemma3: Manifest
) -> None:
    loaded = httpx.post(f"{roomy.url}/models/load", json={"model": f"{gemma3.name}:latest"}, timeout=120)
    assert loaded.status_code == 200 and loaded.json() == {"success": True}
    listed = cli("ps", "--url", roomy.url)
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith(gemma3.name))
    assert "llamacpp" in line and " MB" in line and ("min" in line or " s" in line)
    stopped = cli("stop", gemma3.name, "--url", roomy.url)
    assert stopped.returncode == 0 and f"unloading {gemma3.name}" in stopped.stdout, stopped.stderr
    deadline = time.monotonic() + 30
    while gemma3.name in running(roomy):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    again = cli("stop", gemma3.name, "--url", roomy.url)
    assert again.returncode == 1 and "is not loaded" in again.stdout
    unknown = httpx.post(f"{roomy.url}/models/unload", json={"model": "no-such-model"}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"


def test_localinfer_ps_without_a_server_says_how_to_start_one(tmp_path: Path) -> None:
    answer = cli("ps", "--url", "http://127.0.0.1:9")
    assert answer.returncode != 0 and "cannot reach localinfer" in answer.stderr and "Traceback" not in answer.stderr


def test_localinfer_run_answers_through_a_running_server_sharing_its_models(roomy: Server, gemma3: Manifest) -> None:
    httpx.post(f"{roomy.url}/models/unload", json={"model": gemma3.name}, timeout=30)
    prompt = "The capital of France is"
    answer = cli("run", gemma3.name, prompt, "--max-tokens", "8", "--temperature", "0", "--url", roomy.url)
    assert answer.returncode == 0, answer.stderr
    assert gemma3.name in running(roomy)  # the server loaded it: the answer came from there
    body = {"model": gemma3.name, "messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "temperature": 0}
    chat = httpx.post(f"{roomy.url}/v1/chat/completions", json=body, timeout=120).json()
    assert answer.stdout.strip() == chat["choices"][0]["message"]["content"].strip()


def test_localinfer_run_without_a_server_answers_in_process_with_piped_input(
    smollm2: Manifest, test_home: Path
) -> None:
    command = [sys.executable, "-m", "localinfer.app.cli", "run", smollm2.name, "Repeat this word:"]
    answer = subprocess.run(
        [*command, "--max-tokens", "8", "--url", "http://127.0.0.1:9", "--temperature", "0"],
        input="lighthouse",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "LOCALINFER_HOME": str(test_home), "LOCALINFER_DISCOVER": "false"},
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() and "Traceback" not in answer.stderr


def test_serve_with_no_model_starts_empty_and_loads_each_model_on_its_first_request(
    smollm2: Manifest, gemma3: Manifest, test_home: Path, tmp_path: Path
) -> None:
    with serving("", test_home, tmp_path, *CTX, env={"LOCALINFER_MODEL": smollm2.name}) as server:
        assert running(server) == {}  # healthy with nothing loaded
        assert "models load on their first request" in server.output()
        named = ask(server, gemma3.name, "Hello")
        assert named and set(running(server)) == {gemma3.name}
        unnamed = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, timeout=120)
        assert unnamed.status_code == 200 and unnamed.json()["model"] == smollm2.name  # the model setting's
        assert set(running(server)) == {gemma3.name, smollm2.name}


def test_localinfer_run_answers_on_a_gguf_path_typed_at_the_keyboard(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    """A path is the person at the keyboard's to give (as `localinfer serve ./x.gguf`): run loads that file, and
    answers as the same model registered by name does."""
    gguf = tmp_path / "Some-Model.gguf"
    os.link(smollm2.path, gguf)

    def answer(model: str, home: Path) -> str:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "localinfer.app.cli", "run", model, "What is the capital of France?"),
                *("--max-tokens", "8", "--temperature", "0", "--url", "http://127.0.0.1:9"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "LOCALINFER_HOME": str(home), "LOCALINFER_DISCOVER": "false"},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    by_path = answer(str(gguf), tmp_path / "home")
    assert by_path and by_path == answer(smollm2.name, test_home)
