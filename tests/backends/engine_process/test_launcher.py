"""The engine launcher, for real: stand-in engines started, waited for and stopped with their whole group."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from localinfer.backends.engine_process.launcher import EngineProcess, openai_server
from localinfer.errors import ModelLoadError
from tests.backends.engine_process.conftest import (
    STANDIN_KEY_ENV,
    gone,
    group_members,
    standin_env,
    start_localinfer,
)


def wait_for(condition: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.mark.model
def test_a_localinfer_standin_becomes_ready_and_answers_health(smollm2_gguf: Path, tmp_path: Path) -> None:
    process = start_localinfer(smollm2_gguf, tmp_path)
    try:
        assert httpx.get(f"{process.url}/health").status_code == 200
        assert httpx.get(f"{process.url}/v1/models").status_code == 401
        models = httpx.get(f"{process.url}/v1/models", headers={"Authorization": f"Bearer {process.api_key}"})
        assert models.json()["data"][0]["id"] == "smollm2"
    finally:
        asyncio.run(process.stop())
    assert not group_members(process.pid or 0)


async def test_an_engine_that_exits_at_start_fails_quoting_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    process = EngineProcess(openai_server(command), log_path=tmp_path / "engine.log")
    process.start()
    with pytest.raises(ModelLoadError) as caught:
        await process.wait_ready(30)
    assert "boom" in caught.value.message
    assert "code 3" in caught.value.message
    assert str(tmp_path / "engine.log") in caught.value.hint


async def test_an_engine_never_ready_times_out_and_is_killed(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(300)"]
    process = EngineProcess(openai_server(command), log_path=tmp_path / "engine.log")
    process.start()
    started = time.monotonic()
    with pytest.raises(ModelLoadError, match="not ready after 1 seconds") as caught:
        await process.wait_ready(1.0)
    assert time.monotonic() - started < 6
    assert "loading" in caught.value.message
    assert not process.alive
    assert not group_members(process.pid or 0)


def test_a_command_that_cannot_run_fails_to_load(tmp_path: Path) -> None:
    process = EngineProcess(openai_server([str(tmp_path / "no-such-engine")]), log_path=tmp_path / "engine.log")
    with pytest.raises(ModelLoadError, match="cannot start the engine"):
        process.start()


async def test_extra_args_reach_the_engine_after_host_port_and_key(standin: list[str], tmp_path: Path) -> None:
    argv_file = tmp_path / "argv.json"
    extra = ["--tensor-parallel-size", "2", "--max-model-len", "1024"]
    env = standin_env(tmp_path, STANDIN_ARGV_FILE=str(argv_file))
    process = EngineProcess(
        openai_server(standin, extra, key_env=STANDIN_KEY_ENV), log_path=tmp_path / "engine.log", env=env
    )
    process.start()
    try:
        await process.wait_ready(30)
    finally:
        await process.stop()
    recorded = json.loads(argv_file.read_text())
    assert recorded == ["--host", "127.0.0.1", "--port", str(process.port), *extra]
    assert len(process.api_key) >= 32
    assert process.api_key not in " ".join(process.argv)  # in VLLM_API_KEY: other local users can read argv


async def test_stop_leaves_no_process_behind(standin: list[str], tmp_path: Path) -> None:
    env = standin_env(tmp_path, STANDIN_SPAWN="1")
    process = EngineProcess(openai_server(standin, key_env=STANDIN_KEY_ENV), log_path=tmp_path / "engine.log", env=env)
    process.start()
    await process.wait_ready(30)
    pid = process.pid or 0
    assert wait_for(lambda: len(psutil.Process(pid).children()) == 2)
    descendants = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    await process.stop(grace=5)
    assert not group_members(pid)
    assert gone(descendants)  # the child that started its own session too


async def test_stop_kills_an_engine_that_ignores_sigterm(standin: list[str], tmp_path: Path) -> None:
    env = standin_env(tmp_path, STANDIN_IGNORE_TERM="1")
    process = EngineProcess(openai_server(standin, key_env=STANDIN_KEY_ENV), log_path=tmp_path / "engine.log", env=env)
    process.start()
    await process.wait_ready(30)
    started = time.monotonic()
    await process.stop(grace=0.5)
    assert time.monotonic() - started < 3
    assert not group_members(process.pid or 0)


async def test_a_forgotten_engine_is_stopped_when_collected(standin: list[str], tmp_path: Path) -> None:
    process = EngineProcess(
        openai_server(standin, key_env=STANDIN_KEY_ENV), log_path=tmp_path / "engine.log", env=standin_env(tmp_path)
    )
    process.start()
    await process.wait_ready(30)
    pid = process.pid or 0
    del process
    gc.collect()
    assert not group_members(pid)


def parent_starting_an_engine(standin: list[str], tmp_path: Path, *, then: str = "") -> list[str]:
    """A localinfer-like Python process that starts the stand-in engine, prints its pid once ready, then runs
    ``then`` (a statement)."""
    parent = f"""
        import asyncio, time
        from pathlib import Path
        from localinfer.backends.engine_process.launcher import EngineProcess, openai_server
        launch = openai_server({standin!r}, key_env="VLLM_API_KEY")
        process = EngineProcess(launch, log_path=Path({str(tmp_path / "engine.log")!r}))
        process.start()
        asyncio.run(process.wait_ready(30))
        print(process.pid, flush=True)
        {then}
    """
    return [sys.executable, "-c", textwrap.dedent(parent)]


def test_an_exiting_localinfer_leaves_no_engine_behind(standin: list[str], tmp_path: Path) -> None:
    command = parent_starting_an_engine(standin, tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    pid = int(done.stdout.split()[-1])
    assert not group_members(pid)


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_localinfer_leaves_no_engine_behind(standin: list[str], tmp_path: Path) -> None:
    command = parent_starting_an_engine(standin, tmp_path, then="time.sleep(300)")
    localinfer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert localinfer.stdout is not None
        pid = int(localinfer.stdout.readline())
        assert group_members(pid)
        localinfer.kill()  # no finalizer runs: the kernel must stop the engine
        localinfer.wait()
        assert wait_for(lambda: not group_members(pid), timeout=10)
    finally:
        localinfer.kill()
        localinfer.wait()
