"""``localinfer run MODEL`` and the app's ``--model`` get a model that is not here yet first, as ``ollama run`` does:
pulled in this process (the same progress line and choice of file as ``localinfer pull``), or by the running server
that answers. As a new user runs them: subprocesses on a fresh home, the real huggingface_hub client against a Hub
stand-in on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localinfer.models.store import Manifest, ModelStore
from tests.app.commands.test_pull_cli import SMOL_FILE, SMOL_REPO, hub_env
from tests.app.server.conftest import serving
from tests.hub_standin import HubStandIn

pytestmark = pytest.mark.model

PROMPT = "Name the capital of France."
NO_SERVER = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def hub(smollm2: Manifest) -> Iterator[HubStandIn]:
    with HubStandIn() as standin:
        standin.add_repo(SMOL_REPO, {SMOL_FILE: smollm2.path})
        yield standin


@pytest.fixture(scope="module")
def expected(smollm2: Manifest, test_home: Path) -> str:
    """SmolLM2's greedy answer to PROMPT, from the model already registered in the test home."""
    env = {**os.environ, "LOCALINFER_HOME": str(test_home), "LOCALINFER_DISCOVER": "false"}
    result = localinfer(env, *answer_args(smollm2.name, NO_SERVER))
    assert result.returncode == 0 and result.stdout.strip(), result.stderr
    return result.stdout.strip()


def fresh_env(hub: HubStandIn, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**hub_env(hub.url, tmp_path), "LOCALINFER_DISCOVER": "false", **extra}


def localinfer(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "localinfer.app.cli", *args]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL
    )


def starter_file(smollm2: Manifest, tmp_path: Path) -> str:
    """The starter model's source, offline: SmolLM2's file under a .gguf name (the store keeps it as a blob)."""
    link = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    link.symlink_to(smollm2.path)
    return str(link)


def answer_args(model: str, url: str) -> tuple[str, ...]:
    return ("run", model, PROMPT, "--max-tokens", "8", "--temperature", "0", "--url", url)


def test_run_pulls_a_hub_model_that_is_not_here_then_answers_with_it(
    hub: HubStandIn, expected: str, tmp_path: Path
) -> None:
    env = fresh_env(hub, tmp_path)
    result = localinfer(env, *answer_args(SMOL_REPO, NO_SERVER))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected
    assert SMOL_FILE in result.stderr  # the pull's progress, on stderr: stdout holds the answer alone
    assert ModelStore(tmp_path / "home" / "models").get(SMOL_REPO) is not None


def test_run_of_the_starter_model_on_a_fresh_home_gets_it_first(
    hub: HubStandIn, smollm2: Manifest, expected: str, tmp_path: Path
) -> None:
    env = fresh_env(hub, tmp_path, LOCALINFER_STARTER_SOURCE=starter_file(smollm2, tmp_path))
    result = localinfer(env, *answer_args("smollm2", NO_SERVER))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_run_through_a_server_has_the_server_pull_a_model_it_lacks_and_asks_by_its_registered_name(
    hub: HubStandIn, smollm2: Manifest, expected: str, tmp_path: Path
) -> None:
    env = fresh_env(hub, tmp_path, LOCALINFER_STARTER_SOURCE=starter_file(smollm2, tmp_path))
    typed = f"hf.co/{SMOL_REPO}"  # registered as SMOL_REPO: the answer must come from that model, not the starter
    with serving("", tmp_path / "home", tmp_path, "--ctx-size", "512", env=env) as server:
        result = localinfer(env, *answer_args(typed, server.url))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == expected
        loaded = httpx.get(f"{server.url}/api/ps", timeout=30).json()["models"]
        assert f"{SMOL_REPO}:latest" in {m["name"] for m in loaded}  # the server pulled it and answered with it
        again = localinfer(env, *answer_args(typed, server.url))
        assert again.returncode == 0 and again.stdout.strip() == expected
        assert SMOL_FILE not in again.stderr  # here now: nothing pulled the second time
    assert ModelStore(tmp_path / "home" / "models").get(SMOL_REPO) is not None


def test_run_of_a_name_that_is_nowhere_says_so_in_one_line(hub: HubStandIn, tmp_path: Path) -> None:
    result = localinfer(fresh_env(hub, tmp_path), *answer_args("no-such-model", NO_SERVER))
    assert result.returncode == 1
    assert result.stderr.startswith("localinfer: model 'no-such-model' not found")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_app_with_a_model_that_cannot_be_had_stops_before_opening_with_one_line(
    hub: HubStandIn, tmp_path: Path
) -> None:
    missing = "bartowski/No-Such-Model-GGUF"
    result = localinfer(fresh_env(hub, tmp_path), "--model", missing)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert missing in result.stderr.splitlines()[0]
