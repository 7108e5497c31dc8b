"""scripts/setup builds llama-cpp-python once per (version, build flags) and installs that build into .venv.

A build with other flags has the same version number, so pip keeps the installed one unless told to replace it:
on 2026-11-26 the flags gained ``-mno-avx512fp16``, setup built the new wheel, and .venv went on running the old
libraries (flash attention at half speed) while its stamp named the new wheel."""

from __future__ import annotations

import base64
import csv
import hashlib
import zipfile
from pathlib import Path

import llama_cpp

from tests.packaging.test_wheel import setup_wheel


def record_digest(data: bytes) -> str:
    """A file's digest as a wheel's RECORD writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_the_venv_runs_the_llama_cpp_libraries_setup_built_last() -> None:
    wheel = setup_wheel()
    with zipfile.ZipFile(wheel) as archive:
        record = next(name for name in archive.namelist() if name.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(archive.read(record).decode().splitlines()))
    libraries = {
        path: digest for path, digest, *_ in rows if path.startswith("llama_cpp/lib/") and path.endswith(".so")
    }
    assert "llama_cpp/lib/libggml-cpu.so" in libraries, sorted(libraries)

    site_packages = Path(llama_cpp.__file__).resolve().parents[1]
    stale = [path for path, digest in libraries.items() if record_digest((site_packages / path).read_bytes()) != digest]
    assert not stale, f"{wheel.parent.name}: .venv has other builds of {stale}; run scripts/setup again"
