"""``serve --spec-type``, llama-server's flag for speculative decoding, read as localinfer's ``--spec``: its n-gram
kinds as localinfer's own lookup, ``draft-simple`` as a draft model, ``none`` as off; a kind only llama.cpp's own
drafters serve, or two kinds at once, is refused with what to give instead."""

from __future__ import annotations

import pytest

from localinfer.app.cli import build_parser


@pytest.mark.parametrize(
    ("given", "spec"),
    [("ngram-simple", "ngram"), ("ngram-mod,ngram-map-k", "ngram"), ("draft-simple", "draft"), ("none", "off")],
)
def test_llama_servers_kinds_are_read_as_spec(given: str, spec: str) -> None:
    assert build_parser().parse_args(["serve", "--spec-type", given]).spec == spec


@pytest.mark.parametrize("given", ["draft-eagle3", "ngram-simple,draft-simple"])
def test_a_kind_not_served_here_is_refused_naming_what_is(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--spec-type", given])
    assert "ngram-* (its own lookup) or draft-simple" in capsys.readouterr().err
