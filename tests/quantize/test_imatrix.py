"""Importance matrices: ours against llama-imatrix's on the same text, context and chunks; both of llama.cpp's file
formats; what an importance matrix does to a quantization; and ``localinfer imatrix``'s one-line errors.

llama-imatrix is the one bench/build-llama-cpp builds beside llama-perplexity (from the llama.cpp source that
llama-cpp-python vendors, with the same flags); the tests that compare with it skip, saying so, where it is not
built. It runs with ``-b CTX``, one chunk per batch, as our collector decodes them. On this build our sums are
bit-identical to its own (3 chunks of 128 tokens, and 2 of 1024 split in two micro-batches); the comparison allows
a relative 1e-6, a few float32 roundings, for a build whose kernels round otherwise, while a missed row, a wrong
BOS or a chunk off by one moves the sums by far more (llama-imatrix's default ``-b 2048``, four chunks per batch,
already differs by 1.6e-5).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

from localinfer.app.cli import main
from localinfer.errors import QuantizeError
from localinfer.models.store import ModelStore
from localinfer.quantize import imatrix_collect
from localinfer.quantize.gguf_quantizer import Options, quantize_model
from localinfer.quantize.imatrix import Entry, Matrix, load_imatrix, save_imatrix
from localinfer.quantize.imatrix_collect import Calibration, compute_imatrix
from localinfer.quantize.perplexity import default_text, measure
from localinfer.quantize.quant_types import parse_type
from tests.llama_cpp_tools import llama_tool

pytestmark = pytest.mark.model

CTX = 128
CHUNKS = 3
TEXT = Path(__file__).parents[2] / "src" / "localinfer" / "quantize" / "data" / "default.txt"
RTOL = 1e-6


def llama_imatrix(*args: str, cwd: Path) -> None:
    binary = llama_tool("llama-imatrix")
    subprocess.run([str(binary), *args], cwd=cwd, capture_output=True, timeout=300, check=True)


@pytest.fixture(scope="module")
def theirs(smollm2_f16: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """llama-imatrix's GGUF importance matrix of the F16 SmolLM2 on the default text, 3 chunks of 128 tokens."""
    folder = tmp_path_factory.mktemp("llama-imatrix")
    args = ["-m", str(smollm2_f16), "-f", str(TEXT), "-c", str(CTX), "-b", str(CTX), "--chunks", str(CHUNKS)]
    llama_imatrix(*args, "--no-ppl", "-o", "theirs.gguf", cwd=folder)
    return folder / "theirs.gguf"


def assert_same_values(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=RTOL, err_msg=name)


def test_our_imatrix_equals_llama_imatrixs(
    home: Path, smollm2_f16: Path, theirs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ours.gguf"
    args = ["--text", str(TEXT), "--ctx", str(CTX), "--chunks", str(CHUNKS), "-o", str(out)]
    assert main(["--home", str(home), "imatrix", str(smollm2_f16), *args]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: 210 weights, 3 chunks of 128 tokens")
    ours, reference = load_imatrix(out), load_imatrix(theirs)
    assert (ours.datasets, ours.chunk_count, ours.chunk_size) == ((str(TEXT),), CHUNKS, CTX)
    assert (reference.datasets, reference.chunk_count, reference.chunk_size) == ((str(TEXT),), CHUNKS, CTX)
    assert sorted(ours.entries) == sorted(reference.entries)
    for name, entry in reference.entries.items():
        assert ours.entries[name].counts.tolist() == entry.counts.tolist() == [CHUNKS * CTX], name
    assert_same_values({n: e.sums for n, e in ours.entries.items()}, {n: e.sums for n, e in reference.entries.items()})
    # the same file layout: keys, and each tensor's name, shape and type in the same order
    ours_file, their_file = gguf.GGUFReader(out), gguf.GGUFReader(theirs)
    assert list(ours_file.fields) == list(their_file.fields)
    layout = [(t.name, t.shape.tolist(), t.tensor_type) for t in their_file.tensors]
    assert [(t.name, t.shape.tolist(), t.tensor_type) for t in ours_file.tensors] == layout


def test_a_legacy_dat_loads_to_the_values_of_its_gguf(smollm2_f16: Path, theirs: Path, tmp_path: Path) -> None:
    """llama-imatrix writes its GGUF again as a legacy .dat (--in-file, --output-format dat); both load to the values
    llama-quantize uses."""
    args = ["-m", str(smollm2_f16), "--in-file", str(theirs), "-c", str(CTX), "--output-format", "dat"]
    llama_imatrix(*args, "-o", "x.dat", cwd=tmp_path)
    legacy, modern = load_imatrix(tmp_path / "x.dat"), load_imatrix(theirs)
    assert legacy.legacy and not modern.legacy
    assert (legacy.chunk_count, legacy.datasets) == (CHUNKS, (str(TEXT),))
    assert {e.counts.tolist()[0] for e in legacy.entries.values()} == {CHUNKS}  # ncall: chunks of CTX rows
    assert_same_values(legacy.values(), modern.values())


def test_quantize_with_an_imatrix_file_is_llama_quantizes_file_byte_for_byte(
    home: Path, smollm2_f16: Path, theirs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same importance matrix reaches the quantizer with the same values (sums over counts) and the same
    ``quantize.imatrix.*`` keys: the Q2_K file is llama-quantize's, byte for byte."""
    binary = llama_tool("llama-quantize")
    folder = theirs.parent  # llama-quantize records the path as given: the bare name, as we record it
    command = [str(binary), "--imatrix", theirs.name, str(smollm2_f16), "lq.gguf", "Q2_K"]
    subprocess.run(command, cwd=folder, capture_output=True, timeout=300, check=True)
    args = ["quantize", str(smollm2_f16), "--type", "Q2_K", "--imatrix", str(theirs), "-q"]
    assert main(["--home", str(home), *args]) == 0
    manifest = ModelStore(home / "models").get("smollm2-f16-Q2_K")
    assert manifest is not None
    assert manifest.path.read_bytes() == (folder / "lq.gguf").read_bytes()
    capsys.readouterr()
    assert main(["--home", str(home), "show", "smollm2-f16-Q2_K"]) == 0
    sha256 = hashlib.sha256(theirs.read_bytes()).hexdigest()
    assert f"imatrix             theirs.gguf (sha256 {sha256[:12]}, 210 entries, 3 chunks)" in capsys.readouterr().out


def test_an_imatrix_lowers_q2_ks_divergence_from_the_source(smollm2_f16: Path, tmp_path: Path) -> None:
    """Q2_K calibrated on the default text is another file than Q2_K without, and diverges less from the F16
    source on that text (KLD 0.95 without, 0.71 with 8 chunks of 128 tokens)."""
    store = ModelStore(tmp_path / "models")
    kld: dict[str, float] = {}
    for name, calibration in (("plain", None), ("calibrated", Calibration(ctx=CTX, chunks=8))):
        options = Options(type=parse_type("Q2_K"), calibrate=calibration)
        manifest = quantize_model(store, store, str(smollm2_f16), options, name=f"q2k-{name}").manifest
        divergence = measure(manifest.path, default_text(), base=smollm2_f16, ctx=256, chunks=4).divergence
        assert divergence is not None
        kld[str(manifest.files[0].sha256)] = divergence.kld_mean
    plain, calibrated = kld.values()
    assert len(kld) == 2 and calibrated < 0.9 * plain


def test_iq2_xxs_needs_an_imatrix_and_with_calibrate_answers(
    home: Path, smollm2_f16: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llama_cpp import Llama

    assert main(["--home", str(home), "quantize", str(smollm2_f16), "--type", "IQ2_XXS"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "localinfer: IQ2_XXS needs an importance matrix",
        "hint: add --calibrate (computed from localinfer's default text) or --imatrix FILE",
    ]
    assert not (home / "models").exists() or not any(p.is_file() for p in (home / "models").rglob("*"))

    assert main(["--home", str(home), "quantize", str(smollm2_f16), "--type", "IQ2_XXS", "--calibrate", "-q"]) == 0
    manifest = ModelStore(home / "models").get("smollm2-f16-IQ2_XXS")
    assert manifest is not None
    llm = Llama(str(manifest.path), n_ctx=128, verbose=False)
    try:
        answer = llm.create_completion("The capital of France is", max_tokens=8, temperature=0)
    finally:
        llm.close()
    assert isinstance(answer, dict) and answer["choices"][0]["text"].strip()
    capsys.readouterr()
    assert main(["--home", str(home), "show", "smollm2-f16-IQ2_XXS"]) == 0
    shown = capsys.readouterr().out
    assert "imatrix             calibrated on localinfer's default text, 5 chunks of 512 tokens" in shown
    assert not list((home / "models" / "tmp").glob("*"))  # the calibration's file went with the work folder


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--imatrix", "{text}", "--calibrate"],
            "localinfer: --imatrix and --calibrate both give an importance matrix",
        ),
        (["--imatrix", "{text}"], "is not an importance matrix (GGUF or legacy .dat)"),
        (["--imatrix", "{f16}"], "is a GGUF file but not an importance matrix"),
        (["--imatrix", "{other}"], "is for another model: none of its 1 entries names a weight of smollm2-f16.gguf"),
        (["--calibrate", "{missing}"], "localinfer: cannot read the calibration text"),
    ],
)
def test_bad_imatrix_input_is_one_line_and_leaves_nothing(
    home: Path,
    smollm2_f16: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not an importance matrix, and far too long to be read as an empty legacy file\n")
    other = tmp_path / "other.gguf"
    save_imatrix(
        Matrix({"blk.0.mixer.weight": Entry(np.ones(8, np.float32), np.ones(1, np.int64))}, ("x",), 1, 8), other
    )
    paths = {"text": text, "f16": smollm2_f16, "other": other, "missing": tmp_path / "missing.txt"}
    flags = [flag.format(**paths) for flag in flags]
    assert main(["--home", str(home), "quantize", str(smollm2_f16), "--type", "Q4_0", *flags]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and message in err[0] and err[1].startswith("hint: "), err
    root = home / "models"
    assert not root.exists() or not any(p.is_file() for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("model", "output", "text", "message", "hint"),
    [
        ("missing.gguf", "out.gguf", None, "there is no model or GGUF file called 'missing.gguf'", "localinfer ls"),
        ("{notes}", "out.gguf", None, "is not a GGUF file", "GGUF"),
        ("{f16}", "no-such-folder/out.gguf", None, "the folder", "-o"),
        ("{f16}", ".", None, "is a folder", "-o"),
        ("{f16}", "out.gguf", "{short}", "the text has", "pass a longer --text or a smaller --ctx"),
    ],
)
def test_imatrix_cli_errors_are_one_line_with_a_hint(
    home: Path,
    smollm2_f16: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    model: str,
    output: str,
    text: str | None,
    message: str,
    hint: str,
) -> None:
    notes, short = tmp_path / "notes.txt", tmp_path / "short.txt"
    notes.write_text("not a model\n")
    short.write_text("Only a few words.\n")
    paths = {"f16": smollm2_f16, "notes": notes, "short": short}
    args = ["imatrix", model.format(**paths), "-o", str(tmp_path / output), "--ctx", str(CTX)]
    args += ["--text", text.format(**paths)] if text else []
    assert main(["--home", str(home), *args]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and message in err[0] and err[1].startswith("hint: ") and hint in err[1], err
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*.tmp"))


def test_ctrl_c_in_the_collector_stops_and_writes_nothing(
    home: Path, smollm2_f16: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C that lands in the eval callback (where the decode spends its Python time) is kept, the decode
    ends, and it is raised: the command says so and leaves no file."""

    def interrupted(self: object, node: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(imatrix_collect._Collector, "collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        compute_imatrix(smollm2_f16, default_text(), dataset="x", ctx=CTX, chunks=1)
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "out.gguf"
    assert main(["--home", str(home), "imatrix", str(smollm2_f16), "--ctx", str(CTX), "-o", str(out)]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "localinfer: imatrix interrupted; nothing was written"
    assert list(folder.iterdir()) == []


def test_a_context_below_sixteen_tokens_is_refused(smollm2_f16: Path) -> None:
    with pytest.raises(QuantizeError, match="a context of 8 tokens is too small"):
        compute_imatrix(smollm2_f16, default_text(), dataset="x", ctx=8)
