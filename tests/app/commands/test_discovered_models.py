"""Models other tools keep on disk: ``ls`` lists them and ``serve`` answers with them, without copying a byte.

A fake Ollama store and a fake Hugging Face cache are laid out as the real tools lay them out, holding the
real SmolLM2 file (hard-linked, so nothing is copied here either).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving

HF_REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
HF_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def link(source: Path, target: Path) -> None:
    """Hard-link ``source`` at ``target`` (a symlink across file systems): a real file there, no bytes copied."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        target.symlink_to(source)


def fake_ollama(root: Path, model: Manifest) -> Path:
    digest = model.files[0].sha256
    assert digest is not None
    blob = root / "blobs" / f"sha256-{digest}"
    link(model.path, blob)
    template = root / "blobs" / ("sha256-" + "ab" * 32)
    template.write_text("{{ .Prompt }}")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "cd" * 32},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": model.size},
            {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "ab" * 32, "size": 15},
        ],
    }
    path = root / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / "135m"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    return blob


def fake_hf_cache(hub_cache: Path, model: Manifest) -> Path:
    digest = model.files[0].sha256
    assert digest is not None
    repo = hub_cache / ("models--" + HF_REPO.replace("/", "--"))
    link(model.path, repo / "blobs" / digest)
    pointer = repo / "snapshots" / HF_COMMIT / "SmolLM2-135M-Instruct-Q4_K_M.gguf"
    pointer.parent.mkdir(parents=True)
    pointer.symlink_to(Path("../../blobs") / digest)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(HF_COMMIT)
    return pointer


@pytest.fixture
def other_tools(tmp_path: Path, smollm2: Manifest) -> dict[str, str]:
    fake_ollama(tmp_path / "ollama", smollm2)
    fake_hf_cache(tmp_path / "hf" / "hub", smollm2)
    return {
        "OLLAMA_MODELS": str(tmp_path / "ollama"),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": "",
        "LOCALINFER_HOME": str(tmp_path / "home"),
        "LOCALINFER_CONFIG": str(tmp_path / "no-config.toml"),
    }


def localinfer(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localinfer.app.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )


@pytest.mark.model
def test_ls_lists_models_of_ollama_and_the_hf_cache_in_place(
    other_tools: dict[str, str], tmp_path: Path, smollm2: Manifest
) -> None:
    listed = json.loads(localinfer("ls", "--json", env=other_tools).stdout)
    by_name = {m["name"]: m for m in listed}
    ollama = by_name["smollm2:135m"]
    assert ollama["origin"] == "ollama"
    assert ollama["path"] == str(tmp_path / "ollama" / "blobs" / f"sha256-{smollm2.files[0].sha256}")
    hf = by_name[f"hf.co/{HF_REPO}:Q4_K_M"]
    assert hf["origin"] == "hf-cache" and hf["revision"] == HF_COMMIT
    assert hf["path"].endswith(f"snapshots/{HF_COMMIT}/SmolLM2-135M-Instruct-Q4_K_M.gguf")
    table = localinfer("ls", env=other_tools).stdout.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "QUANT", "FROM", "PATH"]
    assert any(line.startswith("smollm2:135m ") and " ollama " in line for line in table)


@pytest.mark.model
@pytest.mark.parametrize("name", ["smollm2:135m", f"hf.co/{HF_REPO}:Q4_K_M"])
def test_serve_answers_with_a_model_of_another_tool_without_copying_it(
    other_tools: dict[str, str], tmp_path: Path, name: str
) -> None:
    home = tmp_path / "home"
    with serving(name, home, tmp_path, "--ctx-size", "512", env=other_tools) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
        assert next(m.id for m in client.models.list().data) == name
        reply = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0
        )
        assert reply.choices[0].message.content
    assert not (home / "models" / "blobs").exists()
    assert not (home / "models" / "manifests").exists()


@pytest.mark.model
def test_show_and_rm_of_another_tools_model(other_tools: dict[str, str]) -> None:
    shown = json.loads(localinfer("show", "smollm2:135m", "--json", env=other_tools).stdout)
    assert shown["architecture"] == "llama"
    removed = localinfer("rm", "smollm2:135m", env=other_tools)
    assert removed.returncode == 1
    assert "lives in Ollama's store" in removed.stderr and "hint:" in removed.stderr
    assert Path(other_tools["OLLAMA_MODELS"], "manifests", "registry.ollama.ai", "library", "smollm2", "135m").exists()
