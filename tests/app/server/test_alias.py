"""``serve --alias NAME`` (llama-server's --alias, vLLM's --served-model-name): clients call the model NAME."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import serving

pytestmark = pytest.mark.model


def test_an_aliased_model_is_listed_and_answers_under_its_alias(
    smollm2: Manifest, test_home: Path, tmp_path: Path
) -> None:
    with serving(smollm2.name, test_home, tmp_path, "--ctx-size", "512", "--alias", "gpt-4o-mini") as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
        names = [m.id for m in client.models.list()]
        assert names[0] == "gpt-4o-mini"
        assert smollm2.name not in names  # one model, one name, as llama-server lists it
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert reply.model == "gpt-4o-mini"
        assert reply.choices[0].message.content
