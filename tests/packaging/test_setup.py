"""scripts/setup builds llama-cpp-python once per (version, build flags) and installs that build into .venv.

A build with other flags has the same version number, so pip keeps the installed one unless told to replace it:
on 2026-11-26 the flags gained ``-mno-avx512fp16``, setup built the new wheel, and .venv went on running the old
libraries (flash attention at half speed) while its stamp named the new wheel."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import llama_cpp

from localinfer.models.pypi import parse_record
from tests.packaging.test_wheel import setup_wheel


def test_the_venv_runs_the_llama_cpp_libraries_setup_built_last() -> None:
    wheel = setup_wheel()
    with zipfile.ZipFile(wheel) as archive:
        record = next(name for name in archive.namelist() if name.endswith(".dist-info/RECORD"))
        hashes = parse_record(archive.read(record).decode())
    libraries = {
        path: sha256 for path, sha256 in hashes.items() if path.startswith("llama_cpp/lib/") and path.endswith(".so")
    }
    assert "llama_cpp/lib/libggml-cpu.so" in libraries, sorted(libraries)

    site_packages = Path(llama_cpp.__file__).resolve().parents[1]
    stale = [
        path
        for path, sha256 in libraries.items()
        if hashlib.sha256((site_packages / path).read_bytes()).hexdigest() != sha256
    ]
    assert not stale, f"{wheel.parent.name}: .venv has other builds of {stale}; run scripts/setup again"
