"""scripts/screenshot draws the app as the README shows it: the starter model's answer to the prompt, timed."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from localinfer.models.store import Manifest
from tests.docs.screenshot import PROMPT, take


@pytest.mark.model
async def test_the_screenshot_shows_the_prompt_and_the_timed_reply(tmp_path: Path, smollm2: Manifest) -> None:
    svg = await take(tmp_path)
    text = html.unescape(svg).replace("\xa0", " ")
    assert svg.startswith("<svg")
    assert PROMPT in text
    assert "tok/s" in text  # the reply's figures: it finished
