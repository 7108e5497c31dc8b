"""Each engine's recipe, for real, through a stand-in started by the engine's own command line (standins.py): the
command line its parser takes, the key where the engine reads it, the wait for its health route, requests relayed
and generated, failures explained from its log, and its whole process group stopped on unload."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.backends.engine_process import backend as backend_module
from localinfer.backends.engine_process.backend import EngineProcessBackend
from localinfer.backends.engine_process.engines import ENGINE_BACKENDS
from localinfer.backends.engine_process.keyed_main import KEY_ENV
from localinfer.backends.engine_process.launcher import EngineProcess
from localinfer.backends.engine_process.recipe import KEYED_MAIN
from localinfer.backends.engine_process.recipes import RECIPES
from localinfer.backends.engine_process.recipes.trtllm import is_trtllm_engine
from localinfer.backends.registry import engine_for
from localinfer.errors import InvalidRequest, ModelLoadError
from localinfer.models.store import hf_manifest
from localinfer.types import GenerationOptions, GenerationRequest, SamplingParams
from tests.backends.engine_process.conftest import group_members, standin_env, write_trtllm_engine
from tests.backends.engine_process.standins import install_standin
from tests.hf_folder import write_hf_folder

NAME = "org/tiny-hf"
ENGINES = ["vllm", "sglang", "tgi", "trtllm"]
JSON = [("content-type", "application/json")]


def expected_argv(engine: str, folder: str, port: int, key: str) -> list[str]:
    """The command line (after the command) each engine is given for NAME at ``folder`` with a 512-token context
    over 2 GPUs, as its parser reads them: its own flags, from its docs and parser."""
    return {
        "vllm": ["--model", folder, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", NAME,
                 "--max-model-len", "512", "--tensor-parallel-size", "2"],
        "sglang": ["--model-path", folder, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", NAME,
                   "--context-length", "512", "--tp-size", "2", f"--api-key={key}"],  # the key added in-process
        "tgi": ["--model-id", folder, "--hostname", "127.0.0.1", "--port", str(port), "--usage-stats", "off",
                "--max-total-tokens", "512", "--num-shard", "2"],
        "trtllm": [folder, "--host", "127.0.0.1", "--port", str(port), "--max_seq_len", "512", "--tp_size", "2"],
    }[engine]  # fmt: skip


def backend_with_standin(engine: str, tmp_path: Path, gguf: Path, **env: str) -> EngineProcessBackend:
    """``engine``'s backend, its command finding the stand-in that serves ``gguf``."""
    environ = standin_env(tmp_path, **install_standin(engine, tmp_path), STANDIN_GGUF=str(gguf), **env)
    return ENGINE_BACKENDS[engine](log_dir=tmp_path, env=environ, ready_timeout=60, stop_grace=5)


def greedy(prompt: str, max_tokens: int, **sampling: object) -> GenerationRequest:
    options = GenerationOptions(sampling=SamplingParams(temperature=0, seed=1, **sampling), max_tokens=max_tokens)  # type: ignore[arg-type]
    return GenerationRequest("r1", prompt, options)


@pytest.mark.model
@pytest.mark.parametrize("engine", ENGINES)
async def test_each_engine_is_started_by_its_own_command_line_serves_and_stops_with_its_group(
    engine: str, smollm2_gguf: Path, tmp_path: Path
) -> None:
    folder = write_hf_folder(tmp_path / "tiny-hf")
    record = tmp_path / "record.json"
    backend = backend_with_standin(engine, tmp_path, smollm2_gguf, STANDIN_RECORD=str(record))
    await backend.load(LoadSpec(path=folder / "config.json", name=NAME, ctx_size=512, tensor_parallel=2))
    process, relay = backend.process, backend.relay
    assert process is not None and relay is not None
    try:
        seen = json.loads(record.read_text())
        assert seen["argv"] == expected_argv(engine, str(folder), process.port, process.api_key)
        assert seen["key"] == (process.api_key if engine != "trtllm" else None)  # TensorRT-LLM checks no key
        body = {"model": NAME, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
        answer = await relay.forward("POST", "/v1/completions", JSON, json.dumps(body).encode())
        relayed = json.loads(await answer.read())
        assert (answer.status, relayed["usage"]["completion_tokens"]) == (200, 4)
        chunks = [c async for c in backend.generate(greedy("The capital of France is", 4))]
        assert "".join(c.text for c in chunks) == relayed["choices"][0]["text"]
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    finally:
        await backend.unload()
    assert not process.alive
    assert not group_members(process.pid or 0)


@pytest.mark.parametrize("engine", ENGINES)
async def test_each_engine_gets_its_key_without_it_on_the_command_line_other_users_read(
    engine: str, tmp_path: Path
) -> None:
    folder = write_hf_folder(tmp_path / "tiny-hf")
    record = tmp_path / "record.json"
    env = standin_env(tmp_path, **install_standin(engine, tmp_path), STANDIN_RECORD=str(record), STANDIN_FAIL="done")
    recipe = RECIPES[engine]
    process = EngineProcess(recipe.launch(str(folder), served_name=NAME), log_path=tmp_path / "engine.log", env=env)
    process.start()
    with pytest.raises(ModelLoadError, match="exited with code 1"):  # the stand-in records what it got, then exits
        await process.wait_ready(60)
    seen = json.loads(record.read_text())
    assert seen["key"] == (process.api_key if recipe.checks_key else None)  # TensorRT-LLM checks no key
    assert not [arg for arg in seen["cmdline"] if process.api_key in arg]
    assert folder.as_posix() in seen["cmdline"]  # the command line read is the engine's own


async def test_tensorrt_llm_which_checks_no_key_says_so_in_the_load_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = write_hf_folder(tmp_path / "tiny-hf")
    backend = backend_with_standin("trtllm", tmp_path, tmp_path / "unused.gguf", STANDIN_FAIL=FAILURE_LINES["trtllm"])
    with caplog.at_level(logging.WARNING, logger=backend_module.__name__), pytest.raises(ModelLoadError):
        await backend.load(LoadSpec(path=folder, name=NAME))
    assert caplog.messages == [
        "TensorRT-LLM checks no key: it listens on 127.0.0.1 only, but other local users can reach it"
    ]


def test_keyed_main_starts_no_engine_without_its_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    done = subprocess.run(
        [sys.executable, "-m", KEYED_MAIN, "--key-flag=--api-key", "http.server", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr == f"keyed_main: {KEY_ENV} is not set: the engine would start without its key\n"


def test_keyed_main_gives_a_key_that_starts_with_a_dash_as_the_flags_value(tmp_path: Path) -> None:
    (tmp_path / "takes_key.py").write_text(
        "import argparse\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--api-key', required=True)\n"
        "print(p.parse_args().api_key)\n"
    )
    env = {**os.environ, KEY_ENV: "-starts-like-a-flag", "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", KEYED_MAIN, "--key-flag=--api-key", "takes_key"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, "-starts-like-a-flag\n"), done.stderr


def test_generated_engine_keys_never_start_with_a_dash() -> None:
    assert not any(EngineProcess.new_key().startswith("-") for _ in range(2000))


FAILURE_LINES = {
    "vllm": "ValueError: No available memory for the cache blocks.",
    "sglang": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "tgi": "Error: ShardCannotStart",
    "trtllm": "RuntimeError: No GPU devices found on the node",
}


@pytest.mark.parametrize("engine", ENGINES)
async def test_an_engine_that_fails_to_start_is_explained_from_its_log(engine: str, tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "tiny-hf")
    backend = backend_with_standin(engine, tmp_path, tmp_path / "unused.gguf", STANDIN_FAIL=FAILURE_LINES[engine])
    with pytest.raises(ModelLoadError) as failed:
        await backend.load(LoadSpec(path=folder, name=NAME))
    recipe = RECIPES[engine]
    assert failed.value.message.startswith(
        f"{recipe.title} failed to start: {recipe.why_failed(FAILURE_LINES[engine])}"
    )
    assert FAILURE_LINES[engine] in failed.value.message
    assert backend.process is None


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_flag_the_engine_does_not_know_stops_it_before_it_is_ready(engine: str, tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "tiny-hf")
    backend = backend_with_standin(engine, tmp_path, tmp_path / "unused.gguf")
    with pytest.raises(ModelLoadError, match="unrecognized arguments: --no-such-flag"):
        await backend.load(LoadSpec(path=folder, name=NAME, extra_args=("--no-such-flag",)))


def test_tgi_refuses_what_its_completions_route_would_drop() -> None:
    tgi = RECIPES["tgi"]
    for field, value in (("top_k", 5), ("min_p", 0.1), ("presence_penalty", 0.5)):
        with pytest.raises(InvalidRequest) as refused:
            tgi.refuse_unhonoured(greedy("Hi", 4, **{field: value}).options)
        assert refused.value.param == field
    tgi.refuse_unhonoured(greedy("Hi", 4, top_p=0.5, repeat_penalty=1.1).options)  # what it honours passes


def test_a_built_tensorrt_llm_engine_folder_is_a_model_served_by_trtllm_serve_with_its_tensorrt_backend(
    tmp_path: Path,
) -> None:
    engine_dir = write_trtllm_engine(tmp_path / "llama-engine")
    manifest = hf_manifest(engine_dir)
    assert is_trtllm_engine(engine_dir)
    assert engine_for(manifest, None) == "trtllm"
    assert engine_for(hf_manifest(write_hf_folder(tmp_path / "tiny-hf")), None) == "vllm"
    assert RECIPES["trtllm"].model_args(engine_dir) == ["--backend", "tensorrt"]
    assert engine_for(manifest, "sglang") == "sglang"  # the engine setting wins over the files
