"""Chat templates render as llama-server renders them: llama.cpp's own template files (``templates/``: Llama 3.x,
Qwen 2.5/3, QwQ, DeepSeek-R1, Command-R7B, firefunction-v2, Mistral, Gemma 2, Phi 3.5) given to llama-server (built
from the same source) and to ``localinfer serve`` with ``--chat-template-file``, on SmolLM2, the same requests to
both: the rendered prompt (``/apply-template``), the prompt's token count (one BOS, never two), ``--reasoning`` and
``chat_template_kwargs.enable_thinking``, a last assistant turn continued (a prefill), and the requests
llama-server refuses."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

TEMPLATES = Path(__file__).parent / "templates"
REASONING = (
    "Qwen-Qwen3-0.6B",
    "Qwen-QwQ-32B",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
)
CASES = [(path.stem, ()) for path in sorted(TEMPLATES.glob("*.jinja"))] + [
    (name, ("--reasoning", switch)) for name in REASONING for switch in ("on", "off")
]
CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another one."},
]
REQUESTS: dict[str, dict[str, Any]] = {
    "chat": {"messages": CHAT},
    "thinking off": {"messages": CHAT, "chat_template_kwargs": {"enable_thinking": False}},
    "thinking on": {"messages": CHAT, "chat_template_kwargs": {"enable_thinking": True}},
    "no generation prompt": {"messages": CHAT, "add_generation_prompt": False},
    "prefill": {"messages": [*CHAT, {"role": "assistant", "content": "Whill"}]},
    "continue": {
        "messages": [*CHAT, {"role": "assistant", "content": "Whill"}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    },
    "both": {"messages": CHAT, "continue_final_message": True, "add_generation_prompt": True},
    "two assistants": {"messages": [*CHAT[:3], {"role": "assistant", "content": "Red."}]},
}


@dataclass(frozen=True)
class Answers:
    """What a server answered to each of REQUESTS: the status and the prompt (or the error's message) of
    ``/apply-template``, and the chat prompt's token count (``/chat/completions/input_tokens``)."""

    rendered: dict[str, tuple[int, str]]
    prompt_tokens: int


def answers(url: str) -> Answers:
    rendered = {}
    for name, body in REQUESTS.items():
        reply = httpx.post(f"{url}/apply-template", json=body, timeout=120)
        text = reply.json()["prompt"] if reply.status_code == 200 else reply.json()["error"]["message"]
        rendered[name] = (reply.status_code, text)
    counted = httpx.post(f"{url}/chat/completions/input_tokens", json={"messages": CHAT}, timeout=120)
    assert counted.status_code == 200, counted.text
    return Answers(rendered, counted.json()["input_tokens"])


@pytest.fixture(scope="module", params=CASES, ids=lambda case: " ".join((case[0], *case[1])))
def both(
    request: pytest.FixtureRequest, smollm2: Manifest, test_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Answers, Answers]]:
    """A template with flags: (its name, llama-server's answers, localinfer's answers)."""
    name, flags = request.param
    folder = tmp_path_factory.mktemp("template")
    template = ("--chat-template-file", str(TEMPLATES / f"{name}.jinja"))
    with llama_server(smollm2.path, folder, "-c", "1024", "-np", "1", "--jinja", *template, *flags) as url:
        theirs = answers(url)
    with serving(smollm2.name, test_home, folder, "--ctx-size", "1024", *template, *flags) as server:
        ours = answers(server.url)
    yield name, theirs, ours


@pytest.mark.parametrize("asked", list(REQUESTS))
def test_the_prompt_is_the_one_llama_server_renders(asked: str, both: tuple[str, Answers, Answers]) -> None:
    _, theirs, ours = both
    their_status, their_text = theirs.rendered[asked]
    our_status, our_text = ours.rendered[asked]
    assert our_status == their_status, (their_text, our_text)
    if their_status == 200:
        assert our_text == their_text
    else:  # llama-server's own words
        assert their_text in our_text


def test_the_prompt_is_tokenized_as_llama_server_tokenizes_it(both: tuple[str, Answers, Answers]) -> None:
    _, theirs, ours = both
    assert ours.prompt_tokens == theirs.prompt_tokens  # one BOS, not two


def test_a_llama_3_prompt_has_todays_date(both: tuple[str, Answers, Answers]) -> None:
    name, _, ours = both
    prompt = ours.rendered["chat"][1]
    if name.startswith("meta-llama-Llama-3"):
        today = dt.datetime.now()
        assert any(day.strftime("%d %b %Y") in prompt for day in (today, today - dt.timedelta(days=1)))
        assert "26 Jul 2024" not in prompt


def test_the_bos_a_template_writes_for_a_tokenizer_that_adds_one_is_left_out_as_llama_server_leaves_it(
    gemma3: Manifest, test_home: Path, tmp_path: Path
) -> None:
    """Gemma's template writes ``<bos>`` and Gemma 3's tokenizer adds BOS: llama-server's prompt has no ``<bos>``
    text, and the prompt is one BOS token and the rest."""
    template = ("--chat-template-file", str(TEMPLATES / "google-gemma-2-2b-it.jinja"))
    with llama_server(gemma3.path, tmp_path, "-c", "1024", "-np", "1", "--jinja", *template) as url:
        theirs = answers(url)
    with serving(gemma3.name, test_home, tmp_path, "--ctx-size", "1024", *template) as server:
        ours = answers(server.url)
    assert not ours.rendered["chat"][1].startswith("<bos>")
    assert ours.rendered == theirs.rendered
    assert ours.prompt_tokens == theirs.prompt_tokens
