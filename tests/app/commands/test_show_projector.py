"""``localinfer show`` and ``ls`` of a model with a projector: what it sees, the projector's facts as ``ollama show``
lists them, and a projector whose width is not the model's; run in-process through ``main`` on SmolLM2 paired with
header-only projectors (tests/projector_gguf.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from localinfer.app.cli import main
from localinfer.models.store import Manifest, ModelFile, ModelStore
from tests.projector_gguf import write_projector

pytestmark = pytest.mark.model


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2: Manifest) -> Path:
    """A home with SmolLM2 as ``smol-sees`` (its projector 576 wide, as SmolLM2), ``smol-wrong`` (640 wide) and
    ``smol-broken`` (a projector file cut short)."""
    monkeypatch.setenv("LOCALINFER_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.delenv("LOCALINFER_DEBUG", raising=False)
    home = tmp_path / "home"
    store = ModelStore(home / "models")
    broken = write_projector(tmp_path / "broken.gguf")
    broken.write_bytes(broken.read_bytes()[:-64])
    for name, projector in (
        ("smol-sees", write_projector(tmp_path / "mmproj-sees.gguf", text_width=576)),
        ("smol-wrong", write_projector(tmp_path / "mmproj-wrong.gguf", text_width=640)),
        ("smol-broken", broken),
    ):
        paired = ModelFile(projector, projector.stat().st_size, None)
        store.register(dataclasses.replace(smollm2, name=name, projector=paired))
    return home


def run(home: Path, *args: str) -> int:
    return main(["--home", str(home), *args])


def section(out: str, title: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(f"  {title}") + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return [line.strip() for line in lines[start:end]]


def test_show_lists_vision_and_the_projectors_facts(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(home, "show", "smol-sees") == 0
    out = capsys.readouterr().out
    assert "vision              sees images, through its projector" in section(out, "Capabilities")
    projector = tmp_path / "mmproj-sees.gguf"
    assert section(out, "Projector") == [
        "architecture        clip",
        "type                gemma3",
        "parameters          24.6K",
        "quantization        F16",
        "embedding length    32",
        "dimensions          576",
        "layers              1",
        "image size          32 px in 8-px patches (16 patches)",
        f"file                {projector}  {projector.stat().st_size / 1e6:.1f} MB",
    ]
    assert str(projector) in "\n".join(section(out, "Files"))


def test_show_says_when_the_projectors_width_is_not_the_models(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "show", "smol-wrong") == 0
    (mismatch,) = [line for line in section(capsys.readouterr().out, "Projector") if line.startswith("mismatch")]
    assert "640 wide and the model's 576" in mismatch and "refuses" in mismatch


def test_show_of_a_broken_projector_says_so_in_one_row(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "show", "smol-broken") == 0
    out = capsys.readouterr().out
    (unreadable,) = [line for line in section(out, "Projector") if line.startswith("unreadable")]
    assert "truncated" in unreadable
    assert "vision" not in "\n".join(section(out, "Capabilities"))


def test_show_json_gives_the_projector_and_its_capability(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "show", "smol-wrong", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["capabilities"] == ["completion", "chat", "vision"]
    projector = shown["projector"]
    assert (projector["modalities"], projector["dimensions"], projector["image_tokens"]) == (["vision"], 640, 16)
    assert "640 wide" in projector["mismatch"]


def test_ls_marks_the_models_that_see(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "ls") == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["smol-sees"].endswith("(+projector: vision)")
    assert rows["smol-broken"].endswith("(+projector: unreadable)")
    assert run(home, "ls", "--json") == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed["smol-sees"]["modalities"] == ["vision"]
    assert listed["smol-sees"]["projector"].endswith("mmproj-sees.gguf")
