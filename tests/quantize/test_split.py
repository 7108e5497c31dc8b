"""A split GGUF source (the parts ``llama-gguf-split`` writes, as big models come from the Hub): quantized into
one file, or with ``--keep-split`` into as many parts, registered in a folder of their own, loaded and answering,
and removed with the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest
from llama_cpp import Llama

from localinfer.app.cli import main
from localinfer.config import Settings
from localinfer.models.library import ModelLibrary
from localinfer.models.store import ModelStore
from tests.gguf_split import split_gguf

pytestmark = pytest.mark.model


def tensor_types(paths: list[Path]) -> dict[str, str]:
    return {t.name: t.tensor_type.name for path in paths for t in gguf.GGUFReader(path).tensors}


def greedy(path: Path) -> str:
    llm = Llama(str(path), n_ctx=128, verbose=False)
    try:
        out: Any = llm("The capital of France is", max_tokens=6, temperature=0)
        return str(out["choices"][0]["text"])
    finally:
        llm.close()


@pytest.fixture(scope="module")
def split_f16(smollm2_f16: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return split_gguf(smollm2_f16, tmp_path_factory.mktemp("split"), "smollm2-f16", 3)


def test_a_split_source_quantizes_into_one_file_or_with_keep_split_into_as_many_parts(
    home: Path, smollm2_f16: Path, split_f16: list[Path]
) -> None:
    whole = ["--home", str(home), "quantize", str(smollm2_f16), "--type", "Q8_0", "--name", "whole", "-q"]
    assert main(whole) == 0
    assert main(["--home", str(home), "quantize", str(split_f16[0]), "--type", "Q8_0", "--name", "one", "-q"]) == 0
    keep = ["--home", str(home), "quantize", str(split_f16[0]), "--type", "Q8_0", "--name", "parts", "--keep-split"]
    assert main([*keep, "-q"]) == 0
    store = ModelStore(home / "models")
    whole_m, one, parts = (store.get(name) for name in ("whole", "one", "parts"))
    assert whole_m is not None and one is not None and parts is not None
    assert len(one.files) == 1 and one.files[0].sha256 == whole_m.files[0].sha256  # the same file as unsplit
    assert len(parts.files) == 3 and all(f.owned for f in parts.files)
    assert [f.path.name for f in parts.files] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert tensor_types([f.path for f in parts.files]) == tensor_types([whole_m.path])
    assert greedy(parts.path) == greedy(whole_m.path)  # llama.cpp finds the other parts from the first

    freed = ModelLibrary.from_settings(Settings(home=home)).remove("parts")
    assert freed == sum(f.size for f in parts.files)
    assert not (home / "models" / "split").exists() or not any((home / "models" / "split").iterdir())
