"""A child ``localinfer serve`` as an engine: how a GGUF model placed on llama.cpp RPC workers is served out of the
main server's process (``backends/llamacpp/rpc/child.py``), since llama.cpp ends the process that loses a worker.

Its settings come in its environment (``LOCALINFER_*``, as any ``serve`` reads them), the key in
``LOCALINFER_API_KEY``; the model is its file, served under its name (``--alias``) on 127.0.0.1 at the launcher's
port.
"""

from __future__ import annotations

import sys

from localinfer.backends.engine_process.recipe import SAMPLING_FIELDS, Recipe

LOCALINFER = Recipe(
    name="localinfer",
    title="the child localinfer serve",
    command=lambda: [sys.executable, "-m", "localinfer.app.cli", "serve"],
    model_flag=None,
    key_env="LOCALINFER_API_KEY",
    served_name_flag="--alias",
    honours=frozenset({*SAMPLING_FIELDS, "seed", "stop", "max_tokens", "ignore_eos"}),
)
