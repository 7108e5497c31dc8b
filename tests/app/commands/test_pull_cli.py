"""``localinfer pull`` as a user runs it: a subprocess with HF_ENDPOINT pointing at a Hub stand-in on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from localinfer.models.store import Manifest, ModelStore, file_sha256
from tests.app.server.conftest import serving
from tests.capital_answer import CAPITAL_GRAMMAR
from tests.hub_standin import HubStandIn

GEMMA_REPO = "ggml-org/gemma-3-270m-GGUF"
GEMMA_FILE = "gemma-3-270m-Q4_K_M.gguf"
SMOL_REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct-Q4_K_M.gguf"


@pytest.fixture(scope="module")
def hub(smollm2: Manifest, gemma3: Manifest) -> Iterator[HubStandIn]:
    with HubStandIn() as standin:
        standin.add_repo(GEMMA_REPO, {GEMMA_FILE: gemma3.path})
        standin.add_repo(SMOL_REPO, {SMOL_FILE: smollm2.path})
        yield standin


def hub_env(hub_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_ENDPOINT": hub_url,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "LOCALINFER_HOME": str(tmp_path / "home"),
        "LOCALINFER_CONFIG": str(tmp_path / "no-config.toml"),
    }


def pull_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "localinfer.app.cli", "pull", *args]


def blob_dir(tmp_path: Path, repo: str) -> Path:
    return tmp_path / "hf" / "hub" / ("models--" + repo.replace("/", "--")) / "blobs"


def interrupt_pull(hub: HubStandIn, env: dict[str, str], partial: Path, *, at_bytes: int, sig: int) -> str:
    """Run ``localinfer pull`` of Gemma with the Hub holding the transfer open 1 MiB past ``at_bytes``; send ``sig``
    once ``partial`` holds ``at_bytes``, while the pull is certainly still downloading. Returns its stderr."""
    with hub.holding(GEMMA_REPO, GEMMA_FILE, at_bytes + 1024 * 1024):
        process = subprocess.Popen(pull_command(GEMMA_REPO), env=env, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not partial.exists() or partial.stat().st_size < at_bytes:
            assert process.poll() is None, "the pull ended before it could be interrupted"
            assert time.monotonic() < deadline, "the pull never reached the held byte"
            time.sleep(0.05)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == (130 if sig == signal.SIGINT else -sig), stderr
    return stderr


@pytest.mark.model
def test_a_pull_killed_half_way_resumes_from_the_bytes_on_disk(
    hub: HubStandIn, tmp_path: Path, gemma3: Manifest
) -> None:
    env = hub_env(hub.url, tmp_path)
    partial = blob_dir(tmp_path, GEMMA_REPO) / f"{gemma3.files[0].sha256}.incomplete"
    interrupt_pull(hub, env, partial, at_bytes=80_000_000, sig=signal.SIGKILL)
    kept = partial.stat().st_size
    assert 80_000_000 <= kept < gemma3.size
    served_before = hub.bytes_served(GEMMA_REPO, GEMMA_FILE)
    requests_before = len(hub.requests)

    result = subprocess.run(pull_command(GEMMA_REPO), env=env, capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stderr
    ranges = [r.headers.get("range") for r in hub.requests[requests_before:] if r.path.startswith("/cdn/")]
    assert ranges == [f"bytes={kept}-"]
    assert hub.bytes_served(GEMMA_REPO, GEMMA_FILE) - served_before == gemma3.size - kept
    manifest = ModelStore(tmp_path / "home" / "models").get(GEMMA_REPO)
    assert manifest is not None and file_sha256(manifest.path) == gemma3.files[0].sha256
    assert not partial.exists()


@pytest.mark.model
def test_ctrl_c_keeps_the_partial_download_and_says_how_to_resume(
    hub: HubStandIn, tmp_path: Path, gemma3: Manifest
) -> None:
    partial = blob_dir(tmp_path, GEMMA_REPO) / f"{gemma3.files[0].sha256}.incomplete"
    stderr = interrupt_pull(hub, hub_env(hub.url, tmp_path), partial, at_bytes=10_000_000, sig=signal.SIGINT)
    assert "pull interrupted" in stderr and f"hint: run 'localinfer pull {GEMMA_REPO}' again to resume" in stderr
    assert "Traceback" not in stderr
    assert partial.stat().st_size >= 10_000_000
    assert ModelStore(tmp_path / "home" / "models").list() == []


@pytest.mark.model
def test_pull_reports_the_chosen_file_progress_and_the_result(hub: HubStandIn, tmp_path: Path) -> None:
    result = subprocess.run(
        pull_command(SMOL_REPO), env=hub_env(hub.url, tmp_path), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert any(line.startswith(f"using {SMOL_FILE}") and "Q4_K_M" in line for line in lines)
    assert f"pulling {SMOL_FILE}" in lines
    assert f"verifying sha256 of {SMOL_FILE}" in lines
    assert result.stdout.startswith(f"pulled {SMOL_REPO} (")


@pytest.mark.model
def test_quiet_pull_prints_only_the_result(hub: HubStandIn, tmp_path: Path) -> None:
    result = subprocess.run(
        pull_command(SMOL_REPO, "--quiet"), env=hub_env(hub.url, tmp_path), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert len(result.stdout.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message", "hint"),
    [
        (["nobody/missing-GGUF"], "localinfer: there is no repository nobody/missing-GGUF", "HF_TOKEN"),
        ([f"{SMOL_REPO}:Q6_K"], f"localinfer: {SMOL_REPO} has no Q6_K file", "Q4_K_M"),
        (["not a model"], "localinfer: 'not a model' is not a model reference", "org/repo"),
    ],
)
def test_a_pull_that_cannot_work_is_one_line_with_a_hint(
    hub: HubStandIn, tmp_path: Path, args: list[str], message: str, hint: str
) -> None:
    result = subprocess.run(
        pull_command(*args, "--quiet"), env=hub_env(hub.url, tmp_path), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    first, second = result.stderr.splitlines()
    assert first.startswith(message)
    assert second.startswith("hint: ") and hint in second
    assert not (tmp_path / "home" / "models" / "manifests").exists()


def test_no_network_is_one_line_naming_the_endpoint(tmp_path: Path) -> None:
    env = hub_env("http://127.0.0.1:9", tmp_path)
    result = subprocess.run(pull_command(SMOL_REPO), env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "localinfer: cannot reach the Hugging Face Hub at http://127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr


def test_hf_hub_offline_uses_only_the_cache_and_says_what_is_missing(tmp_path: Path) -> None:
    env = {**hub_env("http://127.0.0.1:9", tmp_path), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(pull_command(SMOL_REPO, "--quiet"), env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    first, second = result.stderr.splitlines()
    assert (
        first == f"localinfer: {SMOL_REPO} is not in the Hugging Face cache ({tmp_path / 'hf' / 'hub'}) and "
        "HF_HUB_OFFLINE is set"
    )
    assert second.startswith("hint: unset HF_HUB_OFFLINE")


def test_catalog_lists_short_names(tmp_path: Path) -> None:
    result = subprocess.run(
        pull_command("--catalog"), env=hub_env("http://127.0.0.1:9", tmp_path), capture_output=True, text=True
    )
    assert result.returncode == 0
    rows = [line.split()[:2] for line in result.stdout.splitlines()]
    assert ["llama3.2:1b", "bartowski/Llama-3.2-1B-Instruct-GGUF"] in rows


@pytest.mark.model
def test_ls_json_shows_a_pulled_model_with_its_origin(hub: HubStandIn, tmp_path: Path) -> None:
    env = hub_env(hub.url, tmp_path)
    subprocess.run(pull_command(SMOL_REPO, "-q"), env=env, check=True, capture_output=True, timeout=120)
    listed = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "ls", "--json"], env=env, capture_output=True, text=True
    )
    entry = next(m for m in json.loads(listed.stdout) if m["name"] == SMOL_REPO)
    assert entry["origin"] == "hf" and entry["quantization"] == "Q4_1" and entry["present"]


@pytest.mark.model
def test_serve_pulls_a_hub_model_that_is_not_here_yet_and_answers(hub: HubStandIn, tmp_path: Path) -> None:
    env = hub_env(hub.url, tmp_path)
    with serving(SMOL_REPO, tmp_path / "home", tmp_path, "--ctx-size", "512", env=env) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
        prompt = "The capital of France is"
        forced = {"grammar": CAPITAL_GRAMMAR}  # a choice of capitals: free greedy text differs between CPUs
        reply = client.completions.create(
            model=SMOL_REPO, prompt=prompt, max_tokens=6, temperature=0, extra_body=forced
        )
        assert reply.choices[0].text == " Paris"
        assert f"using {SMOL_FILE}" in server.output()
    assert ModelStore(tmp_path / "home" / "models").get(SMOL_REPO) is not None
