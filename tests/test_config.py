"""Settings: every list setting reads a JSON array from the environment, as docs/configuration.md says, and each
setting has one default, which what is built without settings (the load spec, the scheduler) takes too."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from localinfer.backends.base import LoadSpec
from localinfer.config import Settings
from localinfer.defaults import KEEP_ALIVE_SECONDS
from localinfer.engine.scheduler import DEFAULT_KEEP_ALIVE

LIST_SETTINGS = sorted(
    name for name, field in Settings.model_fields.items() if typing.get_origin(field.annotation) is list
)


def test_the_list_settings_are_found() -> None:
    assert {"allow_hosts", "cors_origins", "pin", "model_dirs", "engine_args"} <= set(LIST_SETTINGS)


@pytest.mark.parametrize("name", LIST_SETTINGS)
def test_a_json_array_in_the_environment_is_read_for_every_list_setting(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    items = ["a b", "c,d"]  # a space and a comma inside: split as text, neither would survive
    monkeypatch.setenv("LOCALINFER_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv(f"LOCALINFER_{name.upper()}", json.dumps(items))
    read = getattr(Settings(), name)
    assert [str(item) for item in read] == items


def test_the_comma_separated_form_still_works(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOCALINFER_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("LOCALINFER_PIN", "gemma3:270m, smollm2")
    assert Settings().pin == ["gemma3:270m", "smollm2"]


@pytest.mark.parametrize(
    "setting", ["batch_size", "ubatch_size", "max_queue", "flash_attn", "cache_reuse", "draft_max", "context_shift"]
)
def test_a_load_spec_built_without_settings_has_the_settings_defaults(setting: str) -> None:
    assert getattr(LoadSpec(Path("m.gguf")), setting) == Settings.model_fields[setting].default


def test_a_scheduler_built_without_settings_keeps_models_as_long_as_the_setting_default() -> None:
    assert (
        DEFAULT_KEEP_ALIVE
        == KEEP_ALIVE_SECONDS
        == Settings(keep_alive=Settings.model_fields["keep_alive"].default).keep_alive_seconds
    )
