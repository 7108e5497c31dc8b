"""Runs an engine's Python module with its key flag added in-process, so the key never shows in the command line
the OS shows every local user (``ps``, ``/proc/PID/cmdline``)::

    python -m localinfer.backends.engine_process.keyed_main --key-flag=--api-key sglang.launch_server ARGS...

runs ``sglang.launch_server`` as ``python -m sglang.launch_server ARGS... --api-key=KEY`` would (``sys.argv`` as
the module reads it, ``__name__`` ``"__main__"``), the key read from ``LOCALINFER_ENGINE_KEY``. The variable is
removed from the environment first, so the engine's own children do not inherit it. Only this process's user (and
root) can read its environment; any user can read its command line.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Final

KEY_ENV: Final = "LOCALINFER_ENGINE_KEY"
KEY_FLAG_PREFIX: Final = "--key-flag="
USAGE: Final = "usage: python -m localinfer.backends.engine_process.keyed_main --key-flag=FLAG MODULE [ARGS...]"


def main(argv: list[str]) -> None:
    """Run the module ``argv`` names with its arguments and ``FLAG KEY`` after them; exits 1 with one line on
    stderr when ``argv`` is not ``--key-flag=FLAG MODULE [ARGS...]`` or the key is not in the environment."""
    if len(argv) < 2 or not argv[0].startswith(KEY_FLAG_PREFIX) or argv[0] == KEY_FLAG_PREFIX:
        sys.exit(USAGE)
    flag, module, args = argv[0].removeprefix(KEY_FLAG_PREFIX), argv[1], argv[2:]
    key = os.environ.pop(KEY_ENV, "")
    if not key:
        sys.exit(f"keyed_main: {KEY_ENV} is not set: the engine would start without its key")
    sys.argv = [module, *args, f"{flag}={key}"]  # one word: a key may start with '-', which argparse reads as a flag
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
