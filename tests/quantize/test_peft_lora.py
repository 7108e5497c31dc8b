"""``localinfer convert FOLDER --to gguf-lora --base MODEL``: a PEFT folder written as llama.cpp's LoRA GGUF. The
test adapter's PEFT folder (Hugging Face's layout) converts to exactly the tensors of its GGUF form (llama.cpp's
layout, which --lora loads: test_lora.py compares their text); what cannot convert is refused in one line, and
nothing is left half-written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest

from localinfer.app.cli import main
from localinfer.models.store import Manifest
from tests.lora_model import LoraFiles

pytestmark = pytest.mark.model


def tensors(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}


def test_the_peft_folder_converts_to_the_tensors_and_keys_llama_cpp_loads(
    smollm2: Manifest, smollm2_lora: LoraFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "adapter"
    shutil.copytree(smollm2_lora.peft, folder)
    assert main(["convert", str(folder), "--to", "gguf-lora", "--base", str(smollm2.path)]) == 0
    out = folder / "adapter_model-F32.gguf"
    assert f"-> {out} (210 adapted llama tensors, rank 4, alpha 8" in capsys.readouterr().out
    ours, theirs = tensors(out), tensors(smollm2_lora.gguf)
    assert sorted(ours) == sorted(theirs)
    assert all(np.array_equal(ours[name], theirs[name]) for name in theirs)
    fields = gguf.GGUFReader(out).fields
    assert fields["general.type"].contents() == "adapter" and fields["adapter.type"].contents() == "lora"
    assert fields["general.architecture"].contents() == "llama"
    assert fields["adapter.lora.alpha"].contents() == 8.0


def test_rslora_is_written_as_the_alpha_that_gives_its_scale(
    smollm2: Manifest, smollm2_lora: LoraFiles, tmp_path: Path
) -> None:
    folder = tmp_path / "rslora"
    shutil.copytree(smollm2_lora.peft, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "use_rslora": True}))
    out = tmp_path / "rs.gguf"
    assert main(["convert", str(folder), "--to", "gguf-lora", "--base", str(smollm2.path), "--outfile", str(out)]) == 0
    alpha = gguf.GGUFReader(out).fields["adapter.lora.alpha"].contents()
    assert alpha / 4 == pytest.approx(8.0 / 2)  # llama.cpp's alpha / rank is rsLoRA's alpha / sqrt(rank)


def test_an_adapter_for_another_base_is_refused_in_one_line_and_nothing_is_written(
    gemma3: Manifest, smollm2_lora: LoraFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "wrong.gguf"
    code = main(
        ["convert", str(smollm2_lora.peft), "--to", "gguf-lora", "--base", str(gemma3.path), "--outfile", str(out)]
    )
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err[1].startswith("hint: give the base model")
        and f"adapts no tensor of {gemma3.path.name} (gemma3, 18 blocks)" in err[0]
    )
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_folder_without_a_peft_config_or_without_base_is_refused(
    smollm2: Manifest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["convert", str(tmp_path), "--to", "gguf-lora", "--base", str(smollm2.path)]) == 1
    assert "has no adapter_config.json: not a PEFT adapter folder" in capsys.readouterr().err
    assert main(["convert", str(tmp_path), "--to", "gguf-lora"]) == 1
    assert "needs the base model" in capsys.readouterr().err
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "use_dora": True}))
    assert main(["convert", str(tmp_path), "--to", "gguf-lora", "--base", str(smollm2.path)]) == 1
    assert "DoRA" in capsys.readouterr().err
