"""A fact the test models answer alike on any CPU: a country's capital, picked from a few.

A model's free greedy text differs between CPUs (llama.cpp's kernels for AVX2 and AVX-512 add up in other orders,
and a near-tie goes either way), so a test that checks what the model answered does not hope the free text holds
it: the answer is held to a choice of capitals (a GBNF grammar, or a JSON schema where the route has no grammar)
and the test checks which one the model took. The model prefers the right one by a margin no rounding moves
(SmolLM2 after "The capital of France is": " Paris" 0.77, " London" 0.01; in the JSON answer to the chat question,
"Paris" 0.56-0.84, the next capital under 0.02), and the choice shows it read the prompt: the wrong capitals are
there to be taken.
"""

from __future__ import annotations

import json
from typing import Any

from openai.types.shared_params import ResponseFormatJSONSchema

CAPITALS = ("Berlin", "London", "Madrid", "Paris", "Rome")
_CHOICE = " | ".join(f'"{capital}"' for capital in CAPITALS)

# A completion of "The capital of X is": a space and one of the capitals, then the end.
CAPITAL_GRAMMAR = f'root ::= " " ({_CHOICE})'

# A chat's answer as JSON, {"capital": "..."}, for the response_format / format / text.format of each dialect.
CAPITAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"capital": {"type": "string", "enum": list(CAPITALS)}},
    "required": ["capital"],
    "additionalProperties": False,
}
# OpenAI's response_format that holds a chat answer to CAPITAL_SCHEMA.
CAPITAL_FORMAT: ResponseFormatJSONSchema = {
    "type": "json_schema",
    "json_schema": {"name": "capital", "schema": CAPITAL_SCHEMA},
}


def capital_in(answer: str | None) -> str:
    """The capital a JSON answer held to CAPITAL_SCHEMA names."""
    assert answer is not None, "no answer"
    capital: str = json.loads(answer)["capital"]
    return capital
