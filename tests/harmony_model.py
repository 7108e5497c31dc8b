"""SmolLM2 made a harmony model (gpt-oss's format): the harmony test model, derived once into the test home.

This copies SmolLM2's GGUF (every tensor byte for byte) with seven of its control tokens renamed to harmony's
(``<|im_start|>`` to ``<|start|>``, six unused ones to ``<|channel|>``, ``<|message|>``, ``<|end|>``,
``<|return|>``, ``<|call|>``, ``<|constrain|>``), kept control tokens as gpt-oss has them, and a chat template in
gpt-oss's layout: a system message that says ``Reasoning: <reasoning_effort>`` (medium unless the template is
told), the system turn and the tools as a developer message, earlier answers on the final channel, an earlier call
on the commentary channel to ``functions.NAME`` with the thinking before it kept when no answer came after it (as
gpt-oss's template keeps it, read from ``thinking``), tool answers from ``functions.NAME``. Unlike gpt-oss's
template, its generation prompt also opens the analysis channel (``<|start|>assistant<|channel|>analysis<|message|>``):
SmolLM2 was never trained on the format and would not open it itself, so it thinks on until the request's budget
writes ``<|end|><|start|>assistant<|channel|>final<|message|>`` for it, then answers; greedy requests make that the
same every time. The copy is registered as ``smollm2-harmony``; its source names the original's sha256 and this
derivation's version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf

from localinfer.models.store import Manifest, ModelStore
from tests.derived_gguf import copy_with_keys, derived_once

NAME = "smollm2-harmony"
VERSION = 2
TOKENS = {  # unused control token -> harmony's
    "<|im_start|>": "<|start|>",  # where SmolLM2 starts a turn: it writes more after it than after another
    "<jupyter_text>": "<|channel|>",
    "<jupyter_code>": "<|message|>",
    "<jupyter_output>": "<|end|>",
    "<jupyter_script>": "<|return|>",
    "<empty_output>": "<|call|>",
    "<issue_comment>": "<|constrain|>",
}
OPENING = "<|start|>assistant<|channel|>analysis<|message|>"
FORCED = "<|end|><|start|>assistant<|channel|>final<|message|>"

TEMPLATE = """\
<|start|>system<|message|>You are a helpful assistant.
Reasoning: {{ reasoning_effort if reasoning_effort is defined else 'medium' }}

# Valid channels: analysis, commentary, final. Channel must be included for every message.{% if tools %}

Calls to these tools must go to the commentary channel: 'functions'.{% endif %}<|end|>
{%- set has_system = messages[0].role in ('system', 'developer') %}
{%- if has_system or tools %}<|start|>developer<|message|>
{%- if has_system %}# Instructions

{{ messages[0].content }}

{% endif %}
{% if tools %}# Tools

## functions

namespace functions {
{% for tool in tools %}
// {{ tool.function.description }}
type {{ tool.function.name }} = (_: {{ tool.function.parameters | tojson }}) => any;
{% endfor %}
} // namespace functions{% endif %}<|end|>{% endif %}
{%- set state = namespace(call=none) %}
{%- for message in messages %}
{%- if loop.first and has_system %}{% continue %}{% endif %}
{%- if message.role == 'assistant' and message.tool_calls %}
{%- set later = namespace(final=false) %}
{%- for after in messages[loop.index:] %}
{%- if after.role == 'assistant' and not after.tool_calls %}{% set later.final = true %}{% endif %}
{%- endfor %}
{%- if message.thinking and not later.final %}\
<|start|>assistant<|channel|>analysis<|message|>{{ message.thinking }}<|end|>{% endif %}
{%- set call = message.tool_calls[0].function %}\
<|start|>assistant to=functions.{{ call.name }}<|channel|>commentary json<|message|>{{ call.arguments | tojson }}\
<|call|>{% set state.call = call.name %}
{%- elif message.role == 'assistant' %}<|start|>assistant<|channel|>final<|message|>{{ message.content }}<|end|>
{%- elif message.role == 'tool' %}\
<|start|>functions.{{ state.call }} to=assistant<|channel|>commentary<|message|>{{ message.content | tojson }}<|end|>
{%- else %}<|start|>{{ message.role }}<|message|>{{ message.content }}<|end|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start|>assistant<|channel|>analysis<|message|>{% endif %}"""


def write_harmony_copy(original: Path, target: Path) -> None:
    """Write ``original`` to ``target`` as the harmony test model."""

    def edit(name: str, value: Any) -> Any:
        if name == gguf.Keys.Tokenizer.LIST:
            missing = set(TOKENS) - set(value)
            assert not missing, f"the original has no {missing}: not the SmolLM2 this derivation was written for"
            return [TOKENS.get(token, token) for token in value]
        return value

    copy_with_keys(original, target, {gguf.Keys.Tokenizer.CHAT_TEMPLATE: TEMPLATE}, edit)


def harmony_model_once(original: Manifest, store: ModelStore) -> Manifest:
    """The harmony copy of ``original`` registered in ``store`` as ``smollm2-harmony``, derived when it is missing
    or was derived from another file or version."""
    return derived_once(
        original, store, NAME, f"harmony-v{VERSION}", lambda target: write_harmony_copy(original.path, target)
    )
