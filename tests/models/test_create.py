"""``localinfer create`` and ``cp``: a model made from a Modelfile records every instruction in its manifest, shares
its base model's files, writes back as a Modelfile that makes it again, and a Modelfile that cannot make a model
leaves the store as it was. A model in a stand-in of Ollama's store keeps its Modelfile's layers here."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from localinfer.app.cli import main
from localinfer.config import Settings
from localinfer.errors import ModelfileError, ModelNotFound
from localinfer.models.create import copy, create, spec_from_modelfile
from localinfer.models.discover import DiscoveryRoots, discover
from localinfer.models.gotemplate import is_go_template
from localinfer.models.library import ModelLibrary
from localinfer.models.modelfile import of_model, parse
from localinfer.models.store import ModelFile, ModelStore, local_manifest
from tests.conftest import MakeGGUF

GO_TEMPLATE = "{{ range .Messages }}<|{{ .Role }}|>{{ .Content }}{{ end }}<|assistant|>"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings().with_overrides(home=tmp_path / "home")


@pytest.fixture
def library(settings: Settings, make_gguf: MakeGGUF) -> ModelLibrary:
    """A store holding ``base``: a GGUF file in the store's own blobs (as a pulled model's)."""
    store = ModelStore(settings.models_dir)
    tiny = make_gguf("base.gguf")
    digest = hashlib.sha256(tiny.read_bytes()).hexdigest()
    blob = store.blob_path(digest)
    blob.parent.mkdir(parents=True)
    shutil.copy(tiny, blob)
    store.register(local_manifest(blob, name="base", sha256=digest))
    return ModelLibrary(store, roots=None)


@pytest.fixture
def adapter(make_gguf: MakeGGUF) -> Path:
    return make_gguf("lora.gguf", metadata={"general.type": "adapter", "adapter.type": "lora"})


def made(library: ModelLibrary, settings: Settings, name: str, text: str, folder: Path) -> ModelFile | None:
    (folder / "Modelfile").write_text(text)
    create(library, name, spec_from_modelfile(parse(text), folder), settings)
    return None


def test_every_instruction_is_recorded_and_the_base_files_are_shared(
    library: ModelLibrary, settings: Settings, adapter: Path
) -> None:
    text = f'''FROM base
ADAPTER {adapter.name}
PARAMETER temperature 0.25
PARAMETER stop "<|end|>"
PARAMETER stop STOP
PARAMETER num_predict 7
SYSTEM """Be a pirate."""
TEMPLATE """{GO_TEMPLATE}"""
MESSAGE user Ahoy?
MESSAGE assistant Arr.
LICENSE MIT
'''
    made(library, settings, "pirate", text, adapter.parent)
    base, pirate = library.find("base"), library.find("pirate")
    assert base is not None and pirate is not None
    assert pirate.files == base.files
    assert pirate.source == "create:base"
    assert [(a.path, a.sha256) for a in pirate.adapters] == [
        (adapter.resolve(), hashlib.sha256(adapter.read_bytes()).hexdigest())
    ]
    d = pirate.defaults
    assert d.system == "Be a pirate."
    assert d.parameters == (("num_predict", 7), ("stop", ("<|end|>", "STOP")), ("temperature", 0.25))
    assert d.messages == (("user", "Ahoy?"), ("assistant", "Arr."))
    assert d.license == ("MIT",)
    assert d.template is not None and not is_go_template(d.template)  # translated once, here


def test_show_modelfile_makes_the_same_model_again(library: ModelLibrary, settings: Settings, adapter: Path) -> None:
    text = (
        f'FROM base\nADAPTER {adapter}\nSYSTEM " padded "\nPARAMETER top_k 5\nMESSAGE user hi\n'
        "TEMPLATE {{ .Prompt }}\n"
    )
    made(library, settings, "first", text, adapter.parent)
    first = library.find("first")
    assert first is not None
    written = of_model(first)
    made(library, settings, "second", written, adapter.parent)
    second = library.find("second")
    assert second is not None
    assert (second.files, second.adapters, second.defaults) == (first.files, first.adapters, first.defaults)
    assert second.defaults.system == " padded "


def test_a_model_from_a_made_model_inherits_its_defaults_and_merges_parameters(
    library: ModelLibrary, settings: Settings, tmp_path: Path
) -> None:
    made(library, settings, "a", "FROM base\nSYSTEM sys\nPARAMETER temperature 0.5\nPARAMETER top_k 3\n", tmp_path)
    made(library, settings, "b", "FROM a\nPARAMETER top_k 9\n", tmp_path)
    b = library.find("b")
    assert b is not None
    assert b.defaults.system == "sys"
    assert b.defaults.parameters == (("temperature", 0.5), ("top_k", 9))


def test_removing_either_model_keeps_the_files_the_other_uses(
    library: ModelLibrary, settings: Settings, tmp_path: Path
) -> None:
    base = library.find("base")
    assert base is not None
    made(library, settings, "mine", "FROM base\nSYSTEM s\n", tmp_path)
    library.remove("base")
    assert base.path.exists()
    copy(library, "mine", "also-mine")
    library.remove("mine")
    assert base.path.exists()
    library.remove("also-mine")
    assert not base.path.exists()  # the last model that used the store's blob is gone


def test_cp_registers_the_same_model_under_a_second_name(
    library: ModelLibrary, settings: Settings, tmp_path: Path
) -> None:
    made(library, settings, "mine", "FROM base\nSYSTEM s\nPARAMETER seed 3\n", tmp_path)
    copied = copy(library, "mine", "yours")
    mine = library.find("mine")
    assert mine is not None
    assert (copied.files, copied.defaults) == (mine.files, mine.defaults)
    with pytest.raises(ModelNotFound):
        copy(library, "nobody", "x")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("FROM base\nWHATEVER x\n", "Modelfile line 2: unknown instruction 'WHATEVER'"),
        ("SYSTEM alone\n", "the Modelfile has no FROM line"),
        ('FROM base\nTEMPLATE """{{ printf "%s" .Prompt }}"""\n', "Modelfile line 2: TEMPLATE: the Go template"),
        ("FROM base\nPARAMETER top_k many\n", "Modelfile line 2: PARAMETER top_k takes an integer, not 'many'"),
        ("FROM base\nADAPTER base.gguf\n", "Modelfile line 2: ADAPTER"),
        ("FROM base\nADAPTER peft\n", "has no adapter_model.safetensors"),  # a PEFT folder is converted
        ("FROM nobody-here\n", "model 'nobody-here' not found"),
    ],
)
def test_a_bad_modelfile_is_one_line_and_leaves_the_store_as_it_was(
    library: ModelLibrary,
    settings: Settings,
    make_gguf: MakeGGUF,
    capsys: pytest.CaptureFixture[str],
    text: str,
    says: str,
) -> None:
    folder = make_gguf("base.gguf").parent
    (folder / "peft").mkdir(exist_ok=True)
    (folder / "peft" / "adapter_config.json").write_text("{}")
    (folder / "Modelfile").write_text(text)
    before = snapshot(library.store.root)
    code = main(["--home", str(settings.home), "create", "broken", "-f", str(folder / "Modelfile"), "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert err[0].startswith("localinfer: ") and says in err[0], err
    assert err[1].startswith("hint: ") and len(err) == 2
    assert snapshot(library.store.root) == before


def test_the_cli_creates_shows_and_copies(
    library: ModelLibrary, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Modelfile").write_text('FROM base\nSYSTEM """Two\nlines"""\nPARAMETER stop "x y"\n')
    home = ["--home", str(settings.home)]
    assert main([*home, "create", "mine", "-f", str(tmp_path / "Modelfile"), "--quiet"]) == 0
    assert capsys.readouterr().out == "created mine from base\n"
    assert main([*home, "show", "mine", "--modelfile"]) == 0
    modelfile = capsys.readouterr().out
    assert [(c.instruction, c.key, c.value) for c in parse(modelfile)][1:] == [
        ("SYSTEM", "", "Two\nlines"),
        ("PARAMETER", "stop", "x y"),
    ]
    assert main([*home, "show", "mine", "--parameters"]) == 0
    assert capsys.readouterr().out == 'stop                           "x y"\n'
    assert main([*home, "cp", "mine", "ours"]) == 0
    assert capsys.readouterr().out == "copied 'mine' to 'ours'\n"
    assert library.find("ours") is not None


def test_an_ollama_model_keeps_its_modelfile_layers(tmp_path: Path, make_gguf: MakeGGUF) -> None:
    root = tmp_path / "ollama"
    layers: list[dict[str, Any]] = []

    def blob(media: str, data: bytes) -> None:
        digest = hashlib.sha256(data).hexdigest()
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "blobs" / f"sha256-{digest}").write_bytes(data)
        layers.append(
            {"mediaType": f"application/vnd.ollama.image.{media}", "digest": f"sha256:{digest}", "size": len(data)}
        )

    blob("model", make_gguf("weights.gguf").read_bytes())
    blob("template", GO_TEMPLATE.encode())
    blob("system", b"You are Zork.")
    blob("params", json.dumps({"temperature": 0.1, "stop": ["<|end|>"], "num_gpu": 99, "mirostat": 1}).encode())
    blob("messages", json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]).encode())
    blob("license", b"Apache-2.0")
    blob("adapter", make_gguf("lora.gguf", metadata={"general.type": "adapter"}).read_bytes())
    manifest_path = root / "manifests" / "registry.ollama.ai" / "library" / "zork" / "latest"
    manifest_path.parent.mkdir(parents=True)
    manifest_path.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))

    (found,) = discover(DiscoveryRoots(hf_cache=None, ollama=root, lmstudio=(), extra=()))
    assert found.name == "zork:latest"
    d = found.defaults
    assert d.system == "You are Zork."
    assert d.parameters == (("stop", ("<|end|>",)), ("temperature", 0.1))  # Ollama's runtime settings are not ours
    assert d.messages == (("user", "hi"), ("assistant", "yo"))
    assert d.license == ("Apache-2.0",)
    assert d.template is not None and "it1.role" in d.template
    assert [a.sha256 for a in found.adapters] == [layers[-1]["digest"].removeprefix("sha256:")]


def test_an_ollama_template_that_cannot_be_translated_leaves_the_ggufs_own(tmp_path: Path, make_gguf: MakeGGUF) -> None:
    root = tmp_path / "ollama"
    (root / "blobs").mkdir(parents=True)
    layers: list[dict[str, Any]] = []
    for media, data in (("model", make_gguf().read_bytes()), ("template", b'{{ template "x" . }}')):
        digest = hashlib.sha256(data).hexdigest()
        (root / "blobs" / f"sha256-{digest}").write_bytes(data)
        layers.append(
            {"mediaType": f"application/vnd.ollama.image.{media}", "digest": f"sha256:{digest}", "size": len(data)}
        )
    path = root / "manifests" / "registry.ollama.ai" / "library" / "odd" / "latest"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"layers": layers}))
    (found,) = discover(DiscoveryRoots(hf_cache=None, ollama=root, lmstudio=(), extra=()))
    assert found.defaults.template is None


def test_an_unknown_message_role_from_a_request_is_refused(library: ModelLibrary, settings: Settings) -> None:
    from localinfer.models.create import CreateSpec

    with pytest.raises(ModelfileError, match="message role 'tool'"):
        create(library, "x", CreateSpec(base="base", messages=(("tool", "hi"),)), settings)
    assert library.find("x") is None


def test_run_takes_a_models_parameters_under_its_own_flags() -> None:
    from localinfer.models.defaults import ModelDefaults, with_parameters
    from localinfer.types import GenerationOptions

    defaults = ModelDefaults(parameters=(("num_predict", 9), ("stop", ("END",)), ("temperature", 0.1), ("top_k", 3)))
    options = with_parameters(GenerationOptions(), defaults, given=())
    assert (options.sampling.temperature, options.sampling.top_k, options.max_tokens, options.stop) == (
        0.1,
        3,
        9,
        ("END",),
    )
    flagged = GenerationOptions(max_tokens=4)
    mine = with_parameters(flagged, defaults, given=("temperature", "num_predict"))
    assert (mine.sampling.temperature, mine.max_tokens, mine.sampling.top_k) == (0.8, 4, 3)
