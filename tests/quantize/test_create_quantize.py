"""``localinfer create -q TYPE``: the base model's weights quantized on the way (as ``ollama create -q``), the
Modelfile's defaults kept, and a refused quantization leaving the store as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from localinfer.app.cli import main
from localinfer.models.metadata import read_gguf_info
from localinfer.models.store import ModelStore


@pytest.mark.model
def test_create_quantizes_a_float_base_and_keeps_the_modelfiles_defaults(
    smollm2_f16: Path, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text(f"FROM {smollm2_f16}\nSYSTEM Be brief.\nPARAMETER top_k 7\n")
    assert main(["--home", str(home), "create", "small", "-f", str(modelfile), "-q", "Q8_0", "--quiet"]) == 0
    store = ModelStore(home / "models")
    made = store.get("small")
    assert made is not None
    assert made.quantization == "Q8_0" and read_gguf_info(made.path).quantization == "Q8_0"
    assert made.path.parent == store.blobs_dir and made.path.stat().st_size < smollm2_f16.stat().st_size
    assert (made.defaults.system, made.defaults.parameters) == ("Be brief.", (("top_k", 7),))
    assert [m.name for m in store.list()] == ["small"]  # the passing name it was quantized under is gone
    assert main(["--home", str(home), "rm", "small"]) == 0
    assert not made.path.exists()


@pytest.mark.model
def test_a_quantized_base_is_refused_and_nothing_is_written(
    smollm2_f16: Path, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from localinfer.models.store import local_manifest

    store = ModelStore(home / "models")
    store.register(local_manifest(smollm2_f16, name="f16"))
    assert main(["--home", str(home), "create", "a", "-f", str(_modelfile(tmp_path, "FROM f16\n")), "-q", "Q4_0"]) == 0
    before = sorted(p.name for p in (home / "models").rglob("*") if p.is_file())
    code = main(["--home", str(home), "create", "b", "-f", str(_modelfile(tmp_path, "FROM a\n")), "-q", "Q8_0"])
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert "already quantized" in err[-2] and err[-1].startswith("hint: ")
    assert sorted(p.name for p in (home / "models").rglob("*") if p.is_file()) == before


def _modelfile(folder: Path, text: str) -> Path:
    path = folder / f"Modelfile-{abs(hash(text))}"
    path.write_text(text)
    return path
