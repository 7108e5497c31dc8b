"""What the app costs: the same multi-turn greedy conversation decoded by the engine alone and through the TUI.

Both use the in-process engine on the same GGUF file and thread count. The TUI run drives the real app headless
(Textual's pilot), so Markdown rendering and layout run on the event loop's thread as they do in a terminal;
the tok/s are the engine's own timings of each reply. The ratio app/engine says how much drawing takes from
decoding (1.0: nothing). On a 2-core machine the event loop competes with llama.cpp's threads for the CPU.

Usage: .venv/bin/python bench/tui.py --model PATH [--threads 0] [--tokens 128]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from localinfer.app.tui.app import LocalInferApp
from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.app.tui.screens.chat import ChatScreen
from localinfer.client.local import LocalClient
from localinfer.config import Settings
from localinfer.engine.engine import Engine
from localinfer.models.library import ModelLibrary
from localinfer.models.pull import pull
from localinfer.models.store import ModelStore
from localinfer.types import ChatMessage, ChatRequest, GenerationOptions, SamplingParams

PROMPTS = ["Explain what a hash map is.", "Write a haiku about rain.", "List three uses of Python."]
NAME = "bench-model"


def client_for(settings: Settings) -> LocalClient:
    library = ModelLibrary.from_settings(settings)
    return LocalClient(Engine(settings, library), library, settings)


async def engine_alone(settings: Settings, tokens: int) -> list[float]:
    client = client_for(settings)
    history: list[ChatMessage] = []
    speeds = []
    try:
        for prompt in PROMPTS:
            history.append(ChatMessage("user", prompt))
            options = GenerationOptions(sampling=SamplingParams(temperature=0), max_tokens=tokens)
            text, speed = "", 0.0
            async for chunk in client.chat(ChatRequest(NAME, tuple(history), options)):
                text += chunk.text
                speed = chunk.timings.predicted_per_second if chunk.timings else speed
            history.append(ChatMessage("assistant", text))
            speeds.append(speed)
    finally:
        await client.close()
    return speeds


async def through_the_app(settings: Settings, tokens: int) -> list[float]:
    store = ConversationStore(settings.home / "conversations.sqlite3")
    conversation = store.create(model=NAME, settings=ConversationSettings(temperature=0, max_tokens=tokens))
    app = LocalInferApp(client_for(settings), store, default_model=NAME, export_dir=settings.home, poll_status=False)
    async with app.run_test(size=(100, 30)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        for prompt in PROMPTS:
            await pilot.press(*prompt, "enter")
            await pilot.pause(0.2)
            await app.workers.wait_for_complete()  # the reply's worker
        return [m.tokens_per_second or 0.0 for m in store.messages(conversation.id) if m.role == "assistant"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        settings = Settings().with_overrides(home=Path(home), discover=False, threads=args.threads, parallel=1)
        manifest = pull(ModelStore(settings.models_dir), str(args.model), settings, name=NAME)
        alone = asyncio.run(engine_alone(settings, args.tokens))
        app = asyncio.run(through_the_app(settings, args.tokens))
    print(f"model {manifest.path.name}, {args.tokens} tokens per reply, threads {args.threads or 'auto'}")
    print(f"{'turn':<6}{'engine tok/s':>14}{'app tok/s':>12}{'app/engine':>12}")
    for turn, (a, b) in enumerate(zip(alone, app, strict=True), 1):
        print(f"{turn:<6}{a:>14.1f}{b:>12.1f}{b / a if a else 0:>12.2f}")
    print(f"{'all':<6}{sum(alone) / len(alone):>14.1f}{sum(app) / len(app):>12.1f}{sum(app) / sum(alone):>12.2f}")


if __name__ == "__main__":
    main()
