"""``localinfer convert SOURCE --to onnx`` as a user runs it: a subprocess, a real model, one-line errors, and
nothing half-written left by a failure or Ctrl-C."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from localinfer.app.commands.progress_line import format_event
from localinfer.convert import builder
from localinfer.convert.builder import BUILDER_MODULE
from localinfer.convert.onnx import resolve_source
from localinfer.models.store import Manifest, ModelStore, hf_manifest
from localinfer.progress import ProgressEvent
from tests.conftest import MakeGGUF
from tests.hf_folder import write_hf_folder
from tests.onnx_model import cli_env, output_log


def convert(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "localinfer.app.cli", "convert", *args]
    env = {**cli_env(home, home.parent), "LOCALINFER_DISCOVER": "false"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def assert_one_line_error(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()  # progress lines first, when it got that far
    assert lines[-2].startswith("localinfer: ") and message in lines[-2], done.stderr
    assert lines[-1].startswith("hint: ")
    assert not any(line.startswith("localinfer: ") for line in lines[:-2])


def assert_nothing_written(home: Path) -> None:
    models = home / "models"
    assert ModelStore(models).list() == []
    for folder in (models / "onnx", models / "tmp"):
        assert not folder.exists() or not any(folder.iterdir()), list(folder.iterdir())


@pytest.mark.model
def test_convert_registers_a_folder_model_and_reports_how_close_it_is_to_the_gguf(
    smollm2: Manifest, smollm2_onnx: Manifest, test_home: Path
) -> None:
    output = output_log(test_home, smollm2_onnx.name).read_text(encoding="utf-8")
    assert f"converted {smollm2.name} -> {smollm2_onnx.name} (int8 for cpu, " in output
    check = re.search(
        r"quality check: KLD from the GGUF: mean (\S+), p99 (\S+); same top token (\S+) % \((\d+) positions\); "
        r"mean Δp (\S+) %; greedy continuations agree for (\d+) of (\d+) tokens",
        output,
    )
    assert check is not None, output
    kld_mean, kld_p99, same_top, delta_p = (float(check.group(i)) for i in (1, 2, 3, 5))
    assert all(math.isfinite(x) for x in (kld_mean, kld_p99, same_top, delta_p)), output
    # localinfer perplexity's yardstick on 2 x 127 positions of the default text: the int8 build of the same weights
    # measured a mean KLD of 0.022 (p99 0.18) and the same top token at 93.3 % with 8-bit activations (VNNI), 0.015
    # (p99 0.10) and 92.9 % with float ones (every MatMulNBits set to accuracy_level 1, what a CPU without VNNI
    # computes); a Q8_0 GGUF of them 0.019, 95.3 %; the int4 build 1.09, 59.8 %. The greedy count cascades from one
    # near-tie (32 of 32 with VNNI, 5 without), so it is reported, not asserted
    assert int(check.group(4)) == 254, output
    assert 0 <= kld_mean < 0.1 and kld_p99 >= 0, output
    assert same_top >= 75, output
    assert -100 <= delta_p <= 100 and int(check.group(6)) <= int(check.group(7)) == 32, output
    for status in ("dequantizing the GGUF weights", "building the int8 ONNX model for cpu", "registering"):
        assert status in output

    folder = smollm2_onnx.path.parent
    assert folder == ModelStore(test_home / "models").onnx_dir / smollm2_onnx.name
    manifest = (smollm2_onnx.format, smollm2_onnx.quantization, smollm2_onnx.path.name)
    assert manifest == ("onnx", "int8", "genai_config.json")
    assert {f.path.name for f in smollm2_onnx.files} == {p.name for p in folder.iterdir()}
    assert all(f.owned for f in smollm2_onnx.files)
    assert {"model.onnx", "tokenizer.json", "chat_template.jinja"} <= {p.name for p in folder.iterdir()}
    provenance = json.loads((folder / "localinfer-convert.json").read_text(encoding="utf-8"))
    assert provenance["source_sha256"] == smollm2.files[0].sha256
    assert (provenance["precision"], provenance["target"]) == ("int8", "cpu")
    assert provenance["builder"].startswith("onnxruntime-genai ")
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert tokenizer["add_bos_token"] is False  # the GGUF's rule, carried over


@pytest.mark.model
def test_ls_shows_a_converted_model_as_its_folder(smollm2_onnx: Manifest, test_home: Path) -> None:
    command = [sys.executable, "-m", "localinfer.app.cli", "ls"]
    env = {**cli_env(test_home, test_home), "LOCALINFER_DISCOVER": "false"}
    listed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    line = next(line for line in listed.splitlines() if line.startswith(smollm2_onnx.name + " "))
    assert line.split()[4:] == ["convert", str(smollm2_onnx.path.parent)]
    assert line.split()[1:4] == [f"{smollm2_onnx.size / 1e6:.1f}", "MB", "int8"]


def test_a_failing_builder_is_summed_up_by_its_exception_line(tmp_path: Path) -> None:
    log = tmp_path / "builder.log"
    log.write_text(
        'Reading embedding layer\nTraceback (most recent call last):\n  File "builder.py", line 9\n'
        "NotImplementedError: The Gemma3ForCausalLM model is not currently supported.\n\n"
    )
    summary = builder.last_error(log)
    assert summary == "NotImplementedError: The Gemma3ForCausalLM model is not currently supported."


def test_the_build_shows_its_progress_in_layers() -> None:
    event = ProgressEvent("building the int8 ONNX model for cpu", total=30, completed=12, unit="layers")
    assert format_event(event) == "building the int8 ONNX model for cpu  12/30 layers  40%"


def test_a_missing_source_is_one_line_with_a_hint(tmp_path: Path) -> None:
    done = convert(tmp_path / "home", "no-such-model", "--to", "onnx")
    assert_one_line_error(done, "there is no model, GGUF file or model folder called 'no-such-model'")
    assert_nothing_written(tmp_path / "home")


def test_a_file_that_is_not_a_model_is_one_line_with_a_hint(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model\n")
    done = convert(tmp_path / "home", str(notes), "--to", "onnx")
    assert_one_line_error(done, "is not a model")
    assert_nothing_written(tmp_path / "home")


def test_a_folder_that_is_not_a_model_is_one_line_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = convert(tmp_path / "home", str(tmp_path / "empty"), "--to", "onnx")
    assert_one_line_error(done, "is not a Hugging Face model folder")
    assert_nothing_written(tmp_path / "home")


def test_a_registered_hugging_face_model_is_converted_from_its_folder(tmp_path: Path) -> None:
    folder = write_hf_folder(tmp_path / "tiny-qwen2")
    store = ModelStore(tmp_path / "models")
    store.register(hf_manifest(folder, name="org/tiny", source="hf:org/tiny"))
    source = resolve_source(store, "org/tiny")
    assert (source.name, source.kind, source.path, source.origin) == ("org/tiny", "hf", folder.resolve(), "hf:org/tiny")


def test_a_precision_the_target_cannot_run_is_refused_first(tmp_path: Path) -> None:
    done = convert(tmp_path / "home", "no-such-model", "--to", "onnx", "--precision", "int8", "--target", "dml")
    assert_one_line_error(done, "cannot make int8 models for dml")


def test_a_gguf_the_converter_cannot_read_fails_in_one_line_and_leaves_nothing(
    tmp_path: Path, make_gguf: MakeGGUF
) -> None:
    broken = make_gguf("tiny.gguf")  # a real GGUF header, but no tokenizer or layers a model needs
    done = convert(tmp_path / "home", str(broken), "--to", "onnx", timeout=300)
    assert_one_line_error(done, "")
    assert_nothing_written(tmp_path / "home")


@pytest.mark.model
def test_ctrl_c_while_building_leaves_nothing_and_stops_the_builder(smollm2: Manifest, tmp_path: Path) -> None:
    home = tmp_path / "home"
    command = [sys.executable, "-m", "localinfer.app.cli", "convert", str(smollm2.path), "--to", "onnx"]
    env = {**cli_env(home, tmp_path), "LOCALINFER_DISCOVER": "false"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not builders_of(home):  # the known point: the builder child is running (it works for tens of seconds)
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the model builder never started"
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "convert interrupted; nothing was written" in stderr
    assert_nothing_written(home)
    assert builders_of(home) == [], "the model builder is still running"


def builders_of(home: Path) -> list[int]:
    """The model builder processes working under ``home``."""
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if BUILDER_MODULE in (p.info["cmdline"] or []) and any(str(home) in a for a in p.info["cmdline"] or [])
    ]
