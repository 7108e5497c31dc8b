"""llama.cpp's built-in chat templates (``chatml``, ``llama3``, ``gemma``, ``phi3``, ``mistral-v7``...), named as
llama-server's ``--chat-template NAME`` names them and rendered by llama.cpp itself (``llama_chat_apply_template``),
so a prompt is byte for byte the one llama.cpp writes for that name."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp.llama_cpp as lc

_MAX_NAMES = 256


def builtin_template_names() -> list[str]:
    """The names llama.cpp has a built-in template for."""
    names = (ctypes.c_char_p * _MAX_NAMES)()
    count = lc.llama_chat_builtin_templates(names, _MAX_NAMES)
    found = (names[i] for i in range(min(count, _MAX_NAMES)))
    return [name.decode() for name in found if name]


def apply_builtin_template(name: str, turns: Sequence[tuple[str, str]], *, add_assistant: bool = True) -> str:
    """``turns`` (role, text) through llama.cpp's template ``name``, ending with the assistant's opening (unless
    not ``add_assistant``). Raises
    ValueError when llama.cpp has no such template or cannot apply it."""
    encoded = [(role.encode(), text.encode()) for role, text in turns]
    chat = (lc.llama_chat_message * max(len(encoded), 1))(*(lc.llama_chat_message(r, t) for r, t in encoded))
    size = 4096 + 2 * sum(len(r) + len(t) for r, t in encoded)
    for _ in range(2):
        buffer = ctypes.create_string_buffer(size)
        n = lc.llama_chat_apply_template(name.encode(), chat, len(encoded), add_assistant, buffer, size)
        if n < 0:
            raise ValueError(f"llama.cpp has no chat template named {name!r}")
        if n <= size:
            return buffer.raw[:n].decode("utf-8", errors="replace")
        size = n
    raise ValueError(f"llama.cpp's chat template {name!r} did not fit its buffer")
