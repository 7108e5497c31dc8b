"""The defaults of the settings that what is built without settings takes too, declared once: ``config.py``'s
``Settings`` default to these, and so do the load spec (``backends/base.py`` ``LoadSpec``), the planner's context,
the scheduler's keep-alive and the RPC child backend. Plain values, no imports: the command line reads them before
it loads pydantic (``localinfer --version`` stays instant).
"""

from __future__ import annotations

from typing import Final, Literal

CTX_CAP: Final = (
    8192  # the context of a model trained for more, when ctx_size is 0 (not a setting: --ctx-size asks more)
)
BATCH_SIZE: Final = 2048
UBATCH_SIZE: Final = 512
MAX_QUEUE: Final = 512  # as Ollama
KEEP_ALIVE: Final = "5m"  # as Ollama
KEEP_ALIVE_SECONDS: Final = 300.0  # KEEP_ALIVE in seconds (tests/test_config.py checks that they agree)
FLASH_ATTN: Final[Literal["auto", "on", "off"]] = "auto"
CACHE_REUSE: Final = 256
DRAFT_MAX: Final = 64
RPC_STALL_TIMEOUT: Final = 5.0
