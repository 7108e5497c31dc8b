"""What the reasoning test model (tests/reasoning_model.py) writes, asked raw of a running server, so that the
reasoning tests of every dialect can say exactly what its thinking and its answer must be: the model never closes
its thinking itself, so with a budget of N the thinking is the first N tokens it writes after the prompt, then
``</think>`` is written in its place, and the answer is what it writes after that."""

from __future__ import annotations

from typing import Any

import httpx

from tests.app.server.conftest import Server

QUESTION: list[dict[str, Any]] = [{"role": "user", "content": "What is the capital of France?"}]


def raw(server: Server, prompt: str | list[int], n: int) -> str:
    """The text the model writes after ``prompt`` (greedy, ``n`` tokens)."""
    return raw_tokens(server, prompt, n)[0]


def raw_tokens(server: Server, prompt: str | list[int], n: int) -> tuple[str, list[int]]:
    """The text and the tokens the model writes after ``prompt`` (text, or token ids), greedy, ``n`` tokens."""
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": True}
    answer = httpx.post(f"{server.url}/completion", json=body, timeout=120).json()
    return answer["content"], answer["tokens"]


def tokens_of(server: Server, text: str) -> list[int]:
    """``text`` as the model's tokens (control tokens' text read as them, no BOS)."""
    body = {"content": text, "add_special": False, "parse_special": True}
    tokens: list[int] = httpx.post(f"{server.url}/tokenize", json=body, timeout=60).json()["tokens"]
    return tokens


def prompt_of(server: Server, messages: list[dict[str, Any]] | None = None, **fields: Any) -> str:
    """The prompt a chat of ``messages`` (QUESTION) with ``fields`` renders to (llama-server's /apply-template)."""
    body = {"messages": messages or QUESTION, **fields}
    prompt: str = httpx.post(f"{server.url}/apply-template", json=body, timeout=60).json()["prompt"]
    return prompt


def budgeted(server: Server, budget: int, limit: int, prompt: str | None = None) -> tuple[str, str]:
    """The thinking and the answer of a greedy chat (of QUESTION, or rendered to ``prompt``) with a thinking
    budget of ``budget`` tokens and ``limit`` tokens in all: the first ``budget`` tokens the model writes, then
    what it writes after ``</think>`` (``limit - budget - 1`` tokens; the forced marker counts as one)."""
    prompt = prompt if prompt is not None else prompt_of(server)
    thinking, thought = raw_tokens(server, prompt, budget)
    closed = tokens_of(server, prompt) + thought + tokens_of(server, "</think>")
    return thinking.rstrip(), raw(server, closed, limit - budget - 1)
