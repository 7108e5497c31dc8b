"""Child-process probes: a hung probe is stopped at its timeout, a crashed one is a sentence, never an exception."""

from __future__ import annotations

import sys
import time

import pytest

from localinfer.hardware import libprobe
from localinfer.hardware.probes import PROBE_MARKER, parse_probe_output, run_command, run_library_probe

HANG = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_command_that_hangs_is_stopped_at_its_timeout() -> None:
    started = time.monotonic()
    result = run_command(HANG, timeout=0.5)
    assert time.monotonic() - started < 5
    assert result.timed_out
    assert result.error is not None and "did not answer within 0.5 s" in result.error


@pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")
def test_a_hung_commands_children_are_stopped_with_it() -> None:
    started = time.monotonic()
    result = run_command(["sh", "-c", "sleep 60 & sleep 60"], timeout=0.5)
    assert result.timed_out
    assert time.monotonic() - started < 5  # a surviving child would hold the pipe open until it exits


def test_a_command_that_cannot_start_says_so() -> None:
    result = run_command(["/nonexistent/nvidia-smi"], timeout=5)
    assert result.error is not None and "could not start" in result.error


def test_a_failing_command_reports_its_status_and_last_error_line() -> None:
    result = run_command([sys.executable, "-c", "import sys; sys.exit('no devices were found')"], timeout=10)
    assert result.error is not None
    assert "exit status 1" in result.error and "no devices were found" in result.error


@pytest.mark.skipif(sys.platform == "win32", reason="signals are POSIX")
def test_a_crashing_probe_is_an_error_result_not_an_exception() -> None:
    crash = [sys.executable, "-c", "import os; os.abort()"]
    data, why = run_library_probe("nvml", timeout=10, command=crash)
    assert why is not None and "SIGABRT" in why
    assert data == {"error": why}


def test_a_hung_probe_gives_no_result_and_a_reason() -> None:
    data, why = run_library_probe("onnx", timeout=0.5, command=HANG)
    assert data is None
    assert why is not None and why.startswith("the onnx probe gave no answer")


def test_probe_output_is_found_among_other_lines() -> None:
    assert parse_probe_output(f'noise\n{PROBE_MARKER}{{"a": 1}}\nmore noise\n') == {"a": 1}
    assert parse_probe_output(f"{PROBE_MARKER}not json\n") is None
    assert parse_probe_output(f"{PROBE_MARKER}[1, 2]\n") is None
    assert parse_probe_output("") is None


def test_the_llamacpp_probe_runs_in_a_child_and_reports_this_cpu_build() -> None:
    data, why = run_library_probe("llamacpp", timeout=60)
    assert why is None and data is not None
    assert data["version"] and "CPU" in data["system_info"]
    assert isinstance(data["gpu_offload"], bool)


def test_the_nvml_probe_reports_a_missing_library_as_an_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if nvidia-ml-py were not installed
    assert libprobe.main(["nvml"]) == 0
    data = parse_probe_output(capsys.readouterr().out)
    assert data is not None and data["error"].startswith("ModuleNotFoundError")


def test_an_unknown_probe_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert libprobe.main(["cuda"]) == 2
    assert "usage" in capsys.readouterr().err
