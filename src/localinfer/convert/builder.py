"""onnxruntime-genai's model builder, run offline in a child process, its output kept in a log.

The builder prints what it reads (``Reading layer 3``); those lines become progress events. It runs in its own
process so its memory (torch, the whole model in float) goes back to the system when it ends, and an interrupt
stops it without leaving this process in a half state.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from localinfer.errors import ConvertError
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

PRECISIONS = ("int4", "int8", "fp16", "fp32")  # the weights of a converted model
TARGETS = ("cpu", "cuda", "dml")  # the devices it is built for

BUILDER_MODULE = "onnxruntime_genai.models.builder"
# What the builder imports, by module name; the convert extra installs them.
BUILDER_NEEDS = ("onnxruntime_genai", "torch", "transformers", "onnx", "onnx_ir", "onnxruntime")
CONVERT_HINT = "pip install 'localinfer[convert]'"
# (precision, target) pairs the builder can make (its own list, less bf16 and WebGPU)
SUPPORTED = {
    ("fp32", "cpu"),
    ("int8", "cpu"),
    ("int4", "cpu"),
    ("fp32", "cuda"),
    ("fp16", "cuda"),
    ("int8", "cuda"),
    ("int4", "cuda"),
    ("fp16", "dml"),
    ("int4", "dml"),
}
_LAYER = re.compile(r"^Reading layer (\d+)")


def builder_version() -> str:
    """The installed onnxruntime-genai's version, which is the builder's. Raises ConvertError when missing."""
    import importlib.metadata  # here: the command line imports this module for its constants

    try:
        return importlib.metadata.version("onnxruntime-genai")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ConvertError("converting to ONNX needs onnxruntime-genai's model builder", hint=CONVERT_HINT) from exc


def check_installed() -> None:
    """Raise ConvertError, naming what is missing, unless everything the builder imports is installed."""
    missing = []
    for module in BUILDER_NEEDS:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(module)
    if missing:
        raise ConvertError(
            f"converting to ONNX needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            "installed",
            hint=CONVERT_HINT,
        )


def validate(precision: str, target: str) -> None:
    if (precision, target) not in SUPPORTED:
        can = sorted(p for p, t in SUPPORTED if t == target)
        raise ConvertError(
            f"the model builder cannot make {precision} models for {target}", hint=f"for {target} use {', '.join(can)}"
        )


def build(
    *,
    source: Path,
    config_folder: Path | None,
    output: Path,
    precision: str,
    target: str,
    work: Path,
    log_path: Path,
    n_layers: int,
    progress: ProgressSink = ignore_progress,
) -> None:
    """Build the ONNX model of ``source`` (a float GGUF file with its ``config_folder``, or a Hugging Face folder)
    into ``output``, the builder's output going to ``log_path``. Raises ConvertError with its last words when it
    fails."""
    command = [sys.executable, "-m", BUILDER_MODULE, "-i", str(source), "-o", str(output)]
    if config_folder is not None:
        command += ["-m", str(config_folder)]
    command += ["-p", precision, "-e", target, "-c", str(work / "cache"), "--extra_options", "hf_token=false"]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
    }
    status = f"building the {precision} ONNX model for {target}"
    progress(ProgressEvent(status, total=n_layers or None, completed=0 if n_layers else None, unit="layers"))
    with (
        log_path.open("w", encoding="utf-8") as log,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
        ) as process,
    ):
        try:
            assert process.stdout is not None
            for line in process.stdout:  # universal newlines: tqdm's carriage returns end lines too
                log.write(line)
                log.flush()  # the log tells how far the builder got while it runs (tail -f), not only once it ends
                layer = _LAYER.match(line)
                if layer and n_layers:
                    progress(ProgressEvent(status, total=n_layers, completed=int(layer.group(1)) + 1, unit="layers"))
            returncode = process.wait()
        except BaseException:
            process.kill()
            raise
    if returncode != 0 or not (output / "genai_config.json").is_file():
        raise ConvertError(
            f"the model builder failed: {last_error(log_path)}", hint=f"its whole output is in {log_path}"
        )


def last_error(log_path: Path) -> str:
    """The builder's last meaningful line: the exception of a traceback, else its last line."""
    lines = [line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line)]
    return (errors or lines or ["no output"])[-1][:400]
