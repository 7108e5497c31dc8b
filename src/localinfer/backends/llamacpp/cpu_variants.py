"""The CPU backend of a portable llama.cpp build: one ``libggml-cpu-<variant>.so`` per instruction set (x64,
haswell for AVX2, skylakex for AVX-512, ...), of which the best this CPU can run is loaded before llama.cpp is
used, as llama.cpp's own releases do (``GGML_BACKEND_DL`` with ``GGML_CPU_ALL_VARIANTS``).

A build for this machine only (``scripts/setup``) links its CPU backend in and has no variants: ``load`` then
does nothing. The packaged app (``packaging/``) calls it from a start-up hook with the bundle's library folder.
Each variant answers ``ggml_backend_score()``: 0 when this CPU lacks an instruction it needs, else higher for
more features; the highest is loaded with ``ggml_backend_load``, the one ggml's ``ggml_backend_load_all`` would
pick. ``LOCALINFER_CPU_VARIANT`` restricts the choice to the named variants (comma-separated), so a build can be
proven on an AVX2-only path on an AVX-512 machine; other backends in the folder (CUDA, Vulkan) are loaded too.

Only ctypes: this runs before ``llama_cpp`` is imported, and ``llama_cpp`` then finds the backends registered in
the same ``libggml`` (a library opened twice by path is one library).
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from localinfer.errors import LocalInferError
from localinfer.hardware.libprobe import CPU_VARIANT_LOADED_ENV  # set once loaded: `localinfer hw` says which

VARIANT_ENV = "LOCALINFER_CPU_VARIANT"
# ggml's library names: libggml-cpu-haswell.so on Linux, ggml-cpu-haswell.dll on Windows (a macOS build links its
# CPU backend in). GGML and GGML_BASE are the names libllama asks for: opened by them, they are one library each.
if sys.platform == "win32":
    LIB, SUFFIX, GGML, GGML_BASE = "", ".dll", "ggml.dll", "ggml-base.dll"
else:
    LIB, SUFFIX, GGML, GGML_BASE = "lib", ".so", "libggml.so.0", "libggml-base.so.0"
PREFIX = f"{LIB}ggml-cpu-"


@dataclass(frozen=True)
class Variant:
    name: str  # haswell
    path: Path
    score: int  # 0: this CPU cannot run it


def variants(lib_dir: Path) -> list[Variant]:
    """Every CPU variant in ``lib_dir`` with its score on this CPU, best first."""
    found = []
    for path in sorted(lib_dir.glob(f"{PREFIX}*{SUFFIX}")):
        found.append(Variant(path.name[len(PREFIX) : -len(SUFFIX)], path, _score(path)))
    return sorted(found, key=lambda v: -v.score)


def _score(path: Path) -> int:
    try:
        library = ctypes.CDLL(str(path))
    except OSError:
        return 0
    score = getattr(library, "ggml_backend_score", None)
    if score is None:
        return 0
    score.restype = ctypes.c_int
    return int(score())


def load(lib_dir: Path, allowed: str | None = None) -> Variant | None:
    """Load the best CPU variant in ``lib_dir`` this CPU can run (among ``allowed``, comma-separated names, when
    given; default: ``LOCALINFER_CPU_VARIANT``), and the folder's other backends. None when ``lib_dir`` has no
    variants (a build with its CPU backend linked in). Raises LocalInferError when no allowed variant runs here."""
    candidates = variants(lib_dir)
    if not candidates:
        return None
    allowed = allowed if allowed is not None else os.environ.get(VARIANT_ENV)
    if allowed:
        names = {name.strip() for name in allowed.split(",") if name.strip()}
        candidates = [v for v in candidates if v.name in names]
    usable = [v for v in candidates if v.score > 0]
    if not usable:
        offered = ", ".join(v.name for v in variants(lib_dir))
        raise LocalInferError(
            f"none of llama.cpp's CPU variants {'named in ' + VARIANT_ENV + ' ' if allowed else ''}runs on this CPU",
            hint=f"this build has {offered}; unset {VARIANT_ENV} or name one this CPU supports",
        )
    best = usable[0]
    _quiet_ggml_log(lib_dir)
    ggml = ctypes.CDLL(str(lib_dir / GGML))  # the name libllama asks for: one library, not two
    ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load.restype = ctypes.c_void_p
    if not ggml.ggml_backend_load(str(best.path).encode()):
        raise LocalInferError(f"llama.cpp could not load its CPU backend {best.path.name}", hint="rebuild the package")
    _load_other_backends(ggml, lib_dir)
    os.environ[CPU_VARIANT_LOADED_ENV] = best.name
    return best


_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_GGML_LOG_LEVEL_WARN, _GGML_LOG_LEVEL_ERROR = 3, 4


def _print_warnings(level: int, text: bytes | None, user_data: ctypes.c_void_p) -> None:
    """ggml's log, as ``localinfer`` shows llama.cpp's until a model is loaded: warnings and errors on stderr,
    not the line per backend loaded (llama.cpp's own log routing takes over when the engine starts)."""
    if level in (_GGML_LOG_LEVEL_WARN, _GGML_LOG_LEVEL_ERROR) and text:
        os.write(2, text)


_warnings_only = _LOG_CALLBACK(_print_warnings)  # kept alive here: llama.cpp calls it for as long as it runs


def _quiet_ggml_log(lib_dir: Path) -> None:
    base = ctypes.CDLL(str(lib_dir / GGML_BASE))
    base.ggml_log_set.argtypes = [_LOG_CALLBACK, ctypes.c_void_p]
    base.ggml_log_set(_warnings_only, None)


def _load_other_backends(ggml: ctypes.CDLL, lib_dir: Path) -> None:
    """GPU backends built alongside (libggml-cuda.so, libggml-vulkan.so...), each loaded if its runtime is here."""
    for path in sorted(lib_dir.glob(f"{LIB}ggml-*{SUFFIX}")):
        if path.name.startswith(PREFIX) or path.name == f"{LIB}ggml-base{SUFFIX}":
            continue
        ggml.ggml_backend_load(str(path).encode())  # NULL when the GPU runtime is missing: the CPU serves
