"""Runs when the packaged app starts, before any of its modules: points llama-cpp-python at the bundle's portable
llama.cpp, loads the CPU variant this machine runs best (localinfer.backends.llamacpp.cpu_variants), and names
the folder of models carried inside (localinfer.models.carried)."""

import os
import sys
from pathlib import Path

bundle = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent))
lib_dir = bundle / "llama_cpp" / "lib"
os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)  # never another llama.cpp: the CPU variant is loaded into this one
carried = bundle / "localinfer_models"
if carried.is_dir():
    os.environ.setdefault("LOCALINFER_CARRIED_MODELS", str(carried))

from localinfer.backends.llamacpp import cpu_variants  # noqa: E402
from localinfer.errors import LocalInferError  # noqa: E402

try:
    cpu_variants.load(lib_dir)
except LocalInferError as exc:
    print(f"localinfer: {exc.message}", file=sys.stderr)
    if exc.hint:
        print(f"hint: {exc.hint}", file=sys.stderr)
    sys.exit(1)
