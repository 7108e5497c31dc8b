"""A reasoning model known from its file (models/metadata/thinking.py): gpt-oss's harmony format from its tokens and
a template that writes the analysis and final channels, both needed."""

from __future__ import annotations

import pytest

from localinfer.models.metadata.gguf import read_gguf_thinking
from localinfer.models.metadata.thinking import HARMONY, HARMONY_TOKENS, thinking_markers
from localinfer.models.store import Manifest

TEMPLATE = "{% for m in messages %}<|start|>{{ m.role }}<|channel|>final<|message|>{{ m.content }}<|end|>{% endfor %}"
TEMPLATE += "{# thinking goes on the analysis channel #}<|start|>assistant"


def test_harmony_tokens_and_a_template_of_analysis_and_final_channels_make_a_harmony_model() -> None:
    assert thinking_markers(TEMPLATE, set(HARMONY_TOKENS).__contains__) == HARMONY


def test_a_template_without_the_analysis_channel_is_no_harmony_model() -> None:
    assert thinking_markers(TEMPLATE.replace("analysis", "other"), set(HARMONY_TOKENS).__contains__) is None


def test_harmony_text_in_a_template_without_the_tokens_is_no_harmony_model() -> None:
    assert thinking_markers(TEMPLATE, {"<|start|>", "<|end|>", "<|message|>"}.__contains__) is None


@pytest.mark.model
def test_the_harmony_test_model_is_read_as_harmony_from_its_gguf(smollm2_harmony: Manifest) -> None:
    assert read_gguf_thinking(smollm2_harmony.path) == HARMONY
