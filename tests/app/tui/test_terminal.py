"""The real ``localinfer`` command in a real terminal (tmux): type a prompt, see the reply, quit cleanly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from localinfer.app.tui.conversations import ConversationSettings, ConversationStore
from localinfer.config import Settings


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def session(with_smollm2: Settings, tmp_path: Path) -> Iterator[str]:
    assert shutil.which("tmux"), "tmux is needed for this test: apt-get install tmux"
    name = f"localinfer-test-{uuid.uuid4().hex[:8]}"
    command = f"{sys.executable} -m localinfer.app.cli; echo EXITED $?; sleep 30"
    env = {
        "LOCALINFER_HOME": str(with_smollm2.home),
        "LOCALINFER_DISCOVER": "false",
        "LOCALINFER_CTX_SIZE": "2048",
        "LOCALINFER_PARALLEL": "1",
        "LOCALINFER_CONFIG": str(tmp_path / "no-config.toml"),
        "TERM": "xterm-256color",
    }
    env_args = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", name, "-x", "80", "-y", "24", "-c", str(tmp_path), *env_args, command],
        check=True,
        env={**os.environ, "TMUX": ""},
    )
    try:
        yield name
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name)


def wait_for_screen(name: str, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(name)
        if text in shown:
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared; the terminal shows:\n{screen(name)}")


@pytest.fixture
def short_replies(with_smollm2: Settings) -> None:
    """A stored conversation (the app opens the latest) whose replies stop after 40 tokens."""
    store = ConversationStore(with_smollm2.home / "conversations.sqlite3")
    store.create(model="smollm2", settings=ConversationSettings(max_tokens=40))
    store.close()


def test_the_command_answers_a_prompt_in_a_real_terminal(
    short_replies: None, session: str, with_smollm2: Settings
) -> None:
    wait_for_screen(session, "Message (Enter sends", timeout=30)
    wait_for_screen(session, "llamacpp:", timeout=60)  # the status bar says the model is loaded
    tmux("send-keys", "-t", session, "-l", "What is the capital of France?")
    tmux("send-keys", "-t", session, "Enter")
    shown = wait_for_screen(session, "tok/s", timeout=120)
    assert "What is the capital of France?" in shown
    reply = shown.split("smollm2", 1)[1]
    assert any(line.strip(" ▕│") for line in reply.splitlines()[1:4]), shown
    tmux("send-keys", "-t", session, "C-q")
    wait_for_screen(session, "EXITED 0", timeout=20)
    store = ConversationStore(with_smollm2.home / "conversations.sqlite3")
    try:
        (conversation,) = store.list_conversations()
        messages = store.messages(conversation.id)
    finally:
        store.close()
    assert [(m.role, m.state) for m in messages] == [("user", "complete"), ("assistant", "complete")]
    assert messages[1].content.strip()
