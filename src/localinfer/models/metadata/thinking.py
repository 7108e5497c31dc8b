"""Whether a model reasons before it answers, and how it marks its thinking: read from its file, never its name.

A reasoning model's vocabulary holds a pair of thinking markers (``<think>`` and ``</think>``: Qwen3, DeepSeek-R1
and its distills, QwQ, Phi-4 reasoning; ``[THINK]``/``[/THINK]``: Magistral; ``<|START_THINKING|>``: Command R7B;
``<seed:think>``: Seed-OSS) and its chat template knows about thinking: it writes the closing marker (to drop
earlier turns' thinking, or to open and close the block in the generation prompt) or reads ``enable_thinking``,
``reasoning_content`` or ``thinking``. Both must hold: a vocabulary that merely has the tokens (many base models
carry reserved ones) is not enough, and neither is a template alone.

gpt-oss writes OpenAI's harmony format: messages ``<|start|>ROLE<|channel|>CHANNEL<|message|>TEXT<|end|>``, its
thinking on the ``analysis`` channel and its answer on ``final``. It is known by the vocabulary holding the
harmony tokens and a template that writes both channels (llama.cpp picks its gpt-oss handler by ``<|channel|>`` in
the template; Ollama by its harmony parser).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from localinfer.types import ThinkingMarkers

KNOWN_MARKERS: Final = (
    ThinkingMarkers("<think>", "</think>"),
    ThinkingMarkers("[THINK]", "[/THINK]"),
    ThinkingMarkers("<|START_THINKING|>", "<|END_THINKING|>"),
    ThinkingMarkers("<seed:think>", "</seed:think>"),
)
TEMPLATE_HINTS: Final = ("enable_thinking", "reasoning_content", "thinking")
HARMONY: Final = ThinkingMarkers(
    "<|channel|>analysis<|message|>", "<|end|>", answer="<|start|>assistant<|channel|>final<|message|>", harmony=True
)
HARMONY_TOKENS: Final = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>")
HARMONY_CHANNELS: Final = ("analysis", "final")
# every text the vocabulary is asked about
MARKER_TOKENS: Final = frozenset(
    (*(text for markers in KNOWN_MARKERS for text in (markers.open, markers.close)), *HARMONY_TOKENS)
)


def thinking_markers(template: str | None, is_token: Callable[[str], bool]) -> ThinkingMarkers | None:
    """The markers of a model whose chat template is ``template`` and whose vocabulary holds a text as one token
    when ``is_token`` says so; None for a model that does not reason (as far as its file says)."""
    if not template:
        return None
    if all(is_token(token) for token in HARMONY_TOKENS) and _speaks_harmony(template):
        return HARMONY
    for markers in KNOWN_MARKERS:
        if not (is_token(markers.open) and is_token(markers.close)):
            continue
        if markers.close in template or any(hint in template for hint in TEMPLATE_HINTS):
            return markers
    return None


def _speaks_harmony(template: str) -> bool:
    """The template writes harmony messages on the analysis and final channels."""
    return "<|channel|>" in template and all(channel in template for channel in HARMONY_CHANNELS)
