"""SmolLM2 made a reasoning model: the thinking test model, derived once into the test home.

Neither test model reasons. This copies SmolLM2's GGUF (every tensor byte for byte) with two of its unused control
tokens made ``<think>`` and ``</think>`` (user-defined tokens, written as their text, as Qwen3 and DeepSeek-R1
have them) and a chat template in Qwen3's layout: tools offered in the system turn and called in ``<tool_call>``
blocks, earlier turns' thinking dropped, and the generation prompt opening the thinking (``<think>\\n``, as
DeepSeek-R1's and Qwen3's thinking models' templates do) unless ``enable_thinking`` is false, which writes an empty
block instead. SmolLM2 was never trained on the markers: it thinks on until the request's budget writes
``</think>`` for it (or its tokens run out), then answers; greedy requests make that the same every time. The copy
is registered as ``smollm2-think``; its source names the original's sha256 and this derivation's version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf

from localinfer.models.store import Manifest, ModelStore
from tests.derived_gguf import copy_with_keys, derived_once

NAME = "smollm2-think"
VERSION = 1
MARKERS = {"<issue_start>": "<think>", "<issue_closed>": "</think>"}  # unused control token -> marker

TEMPLATE = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>{% for tool in tools %}
{{ tool | tojson }}{% endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> \
XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}
{%- set content = message.content or '' %}
{%- if '</think>' in content %}{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}
<|im_start|>assistant
{{ content }}{% for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role != 'system' %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% else %}<think>
{% endif %}{% endif %}"""


def _edit(name: str, value: Any) -> Any:
    if name == gguf.Keys.Tokenizer.LIST:
        missing = set(MARKERS) - set(value)
        assert not missing, f"the original has no {missing}: not the SmolLM2 this derivation was written for"
        return [MARKERS.get(token, token) for token in value]
    return value


def write_reasoning_copy(original: Path, target: Path) -> None:
    """Write ``original`` to ``target`` as the reasoning test model."""
    reader = gguf.GGUFReader(original)
    tokens = reader.fields[gguf.Keys.Tokenizer.LIST]
    ids = [i for i, part in enumerate(tokens.data) if bytes(tokens.parts[part]).decode("utf-8") in MARKERS]
    types = list(reader.fields[gguf.Keys.Tokenizer.TOKEN_TYPE].contents())

    def edit(name: str, value: Any) -> Any:
        if name == gguf.Keys.Tokenizer.TOKEN_TYPE:
            return [gguf.TokenType.USER_DEFINED if i in ids else t for i, t in enumerate(types)]
        return _edit(name, value)

    copy_with_keys(original, target, {gguf.Keys.Tokenizer.CHAT_TEMPLATE: TEMPLATE}, edit)


def reasoning_model_once(original: Manifest, store: ModelStore) -> Manifest:
    """The reasoning copy of ``original`` registered in ``store`` as ``smollm2-think``, derived when it is missing
    or was derived from another file or version."""
    return derived_once(
        original, store, NAME, f"think-v{VERSION}", lambda target: write_reasoning_copy(original.path, target)
    )
