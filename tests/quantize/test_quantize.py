"""``localinfer quantize``: llama.cpp's quantizer from the CLI, registered with its lineage; bad input is one line
of error and leaves no file and no manifest."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import gguf
import pytest

from localinfer.app.cli import main
from localinfer.errors import QuantizeError
from localinfer.models.store import Manifest, ModelStore
from localinfer.progress import ProgressEvent
from localinfer.quantize import gguf_quantizer
from localinfer.quantize.gguf_quantizer import Options, estimate_size, quantize_model
from localinfer.quantize.quant_types import parse_type
from tests.llama_cpp_tools import llama_tool

pytestmark = pytest.mark.model


def leftovers(home: Path) -> list[Path]:
    """Every file under the home's store (a failed run must leave none)."""
    root = home / "models"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def tensor_types(path: Path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def test_quantize_writes_registers_and_shows_the_lineage_and_check_figures(
    home: Path, smollm2_f16: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--home", str(home), "quantize", str(smollm2_f16), "--type", "q8_0", "--check", "-q"]) == 0
    out = capsys.readouterr().out
    assert "quantized smollm2-f16 -> smollm2-f16-Q8_0 (Q8_0" in out
    assert "mean KLD" in out and "same top token" in out
    manifest = ModelStore(home / "models").get("smollm2-f16-Q8_0")
    assert manifest is not None and manifest.quantization == "Q8_0"
    assert manifest.source == f"quantize:file:{smollm2_f16}"
    types = tensor_types(manifest.path)
    assert {t for name, t in types.items() if name.endswith("_q.weight")} == {"Q8_0"}
    assert {t for name, t in types.items() if name.endswith("norm.weight")} == {"F32"}
    records = list((home / "models" / "quantized").iterdir())
    manifest_file = home / "models" / "manifests" / "smollm2-f16-Q8_0.json"
    assert leftovers(home) == sorted([manifest.path, manifest_file, *records])

    assert main(["--home", str(home), "show", "smollm2-f16-Q8_0", "--json"]) == 0
    lineage = json.loads(capsys.readouterr().out)["lineage"]
    assert lineage["source_name"] == "smollm2-f16" and lineage["source_type"] == "F16"
    assert lineage["type"] == "Q8_0" and lineage["requantized"] is False
    quality = lineage["quality"]
    assert quality["ctx"] == 256 and 0 < quality["divergence"]["kld_mean"] < 0.05
    assert main(["--home", str(home), "show", "smollm2-f16-Q8_0"]) == 0
    text = capsys.readouterr().out
    assert "quantized from      smollm2-f16 (F16" in text and "mean KLD" in text

    assert main(["--home", str(home), "rm", "smollm2-f16-Q8_0"]) == 0
    assert leftovers(home) == []  # the file, its manifest and its lineage record


def test_the_size_estimate_is_within_ten_percent_of_the_file(smollm2_f16: Path, tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    for name in ("Q8_0", "Q4_K_M", "Q2_K"):
        options = Options(type=parse_type(name))
        done = quantize_model(store, store, str(smollm2_f16), options)
        assert done.manifest.size == pytest.approx(estimate_size((smollm2_f16,), options), rel=0.1), name


def test_a_quantized_source_is_refused_without_allow_requantize(
    home: Path, smollm2: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--home", str(home), "quantize", str(smollm2.path), "--type", "Q8_0"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("is already quantized (Q4_1); quantizing it again compounds the loss")
    assert "--allow-requantize" in err[1]
    assert leftovers(home) == []


@pytest.mark.parametrize(
    ("source", "type_name", "message"),
    [
        ("{f16}", "Q9_9", "localinfer: unknown quantization type 'Q9_9'"),
        ("missing.gguf", "Q8_0", "localinfer: there is no model or GGUF file called 'missing.gguf'"),
        ("{dir}", "Q8_0", "is a folder, not a GGUF file"),
        ("{text}", "Q8_0", "is not a GGUF file"),
        ("{cut}", "Q8_0", "cannot be read as GGUF"),
        ("{f16}", "IQ2_XXS", "localinfer: IQ2_XXS needs an importance matrix"),
    ],
)
def test_bad_input_is_one_line_with_a_hint_and_leaves_nothing(
    home: Path,
    smollm2_f16: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    source: str,
    type_name: str,
    message: str,
) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    cut = tmp_path / "cut.gguf"  # a GGUF cut off inside its header
    cut.write_bytes(smollm2_f16.read_bytes()[:4096])
    source = source.format(f16=smollm2_f16, dir=tmp_path, text=text, cut=cut)
    assert main(["--home", str(home), "quantize", source, "--type", type_name]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and message in err[0] and err[1].startswith("hint: ")
    if type_name == "Q9_9":
        assert "Q4_K_M" in err[1] and "IQ4_XS" in err[1]
    assert leftovers(home) == []


def test_a_disk_too_small_is_refused_before_writing(
    home: Path, smollm2_f16: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gguf_quantizer, "free_bytes", lambda path: 50_000_000)
    assert main(["--home", str(home), "quantize", str(smollm2_f16), "--type", "Q8_0"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("localinfer: not enough disk space: the Q8_0 file needs about 145 MB and 50 MB")
    assert leftovers(home) == []


def test_ctrl_c_kills_the_quantizer_and_leaves_nothing(smollm2_f16: Path, tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    seen: list[ProgressEvent] = []

    def interrupt(event: ProgressEvent) -> None:
        seen.append(event)
        if event.unit == "tensors":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        quantize_model(store, store, str(smollm2_f16), Options(type=parse_type("Q4_K_M")), progress=interrupt)
    assert seen[-1].unit == "tensors" and seen[-1].total == 272
    assert store.list() == []
    assert [p for p in store.root.rglob("*") if p.is_file()] == []


def test_a_taken_name_is_refused(smollm2_f16: Path, smollm2: Manifest, tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    store.register(smollm2)
    with pytest.raises(QuantizeError, match="'smollm2' is already a model here"):
        quantize_model(store, store, str(smollm2_f16), Options(type=parse_type("q4_k")), name="smollm2")


def test_types_are_case_insensitive_with_llama_quantizes_aliases() -> None:
    assert parse_type("q4_k_m").name == "Q4_K_M"
    assert parse_type("Q4_K").name == "Q4_K_M"
    assert parse_type("bf16").ftype == 32


@pytest.mark.parametrize("type_name", ["Q4_K_M", "Q2_K"])
def test_our_file_has_llama_quantizes_tensor_types_and_size(smollm2_f16: Path, tmp_path: Path, type_name: str) -> None:
    binary = llama_tool("llama-quantize")
    theirs = tmp_path / "theirs.gguf"
    subprocess.run([str(binary), str(smollm2_f16), str(theirs), type_name], capture_output=True, check=True)
    store = ModelStore(tmp_path / "models")
    ours = quantize_model(store, store, str(smollm2_f16), Options(type=parse_type(type_name))).manifest.path
    assert tensor_types(ours) == tensor_types(theirs)
    assert ours.stat().st_size == theirs.stat().st_size
