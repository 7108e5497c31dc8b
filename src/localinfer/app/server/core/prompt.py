"""A chat request's prompt without generating: what llama-server's /apply-template, /chat/completions/input_tokens
and Anthropic's /v1/messages/count_tokens answer."""

from __future__ import annotations

from localinfer.engine.engine import Engine
from localinfer.types import ChatRequest


async def prompt_tokens(engine: Engine, core: ChatRequest) -> int:
    """How many tokens ``core``'s prompt is: rendered as ``Engine.chat`` renders it, tokenized by the model."""
    rendered = await engine.render(core)
    media = tuple(part for message in core.messages for part in message.media)
    if media:  # each image counts as the tokens the model's projector makes of it
        return await engine.count_media_prompt(core.model, rendered.text, media, add_special=rendered.add_special)
    tokens = await engine.tokenize(core.model, rendered.text, add_special=rendered.add_special, parse_special=True)
    return len(tokens)
