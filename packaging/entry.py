"""The packaged app's entry point: the ``localinfer`` command line, as the ``localinfer`` script runs it.

There is no Python beside the app, so localinfer's child processes, which run ``sys.executable -m MODULE`` or
``sys.executable -c CODE`` (the hardware probes, the quantize worker), run the app itself: it answers those two
forms as a Python interpreter would, with the modules it carries.
"""

import runpy
import sys


def run_as_python(argv: list[str]) -> None:
    if argv[1] == "-m":
        sys.argv = [argv[2], *argv[3:]]
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *argv[3:]]
        exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] in ("-m", "-c"):
        run_as_python(sys.argv)
        sys.exit(0)
    from localinfer.app.cli import main

    sys.exit(main())
