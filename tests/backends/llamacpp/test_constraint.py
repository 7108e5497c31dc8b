"""Schemas compiled into llguidance constraints on SmolLM2's real vocabulary, and the sampler that applies them.

Every schema either compiles into a constraint that admits exactly what the schema allows, or is refused with
an InvalidRequest naming ``response_format.json_schema.schema``; none may crash or run away.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import llama_cpp.llama_cpp as lc
import numpy as np
import pytest

from localinfer.backends.llamacpp import constraint as constraint_module
from localinfer.backends.llamacpp.constraint import SCHEMA_PARAM, Constraint, ConstraintCompiler
from localinfer.backends.llamacpp.sampling import build_sampler
from localinfer.errors import GenerationFailed, InvalidRequest
from localinfer.models.store import Manifest
from localinfer.types import ResponseFormat, SamplingParams

pytestmark = pytest.mark.model

BOMBS: dict[str, dict[str, Any]] = {
    "long string": {"type": "string", "maxLength": 20000},
    "long array": {"type": "array", "maxItems": 30000},
    "long pattern": {"pattern": "^a{0,20000}$"},
}


@pytest.fixture(scope="module")
def vocab(smollm2: Manifest) -> Iterator[lc.llama_vocab_p]:
    lc.llama_backend_init()
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(smollm2.path).encode(), params)
    assert model
    yield lc.llama_model_get_vocab(model)
    lc.llama_model_free(model)


@pytest.fixture(scope="module")
def compiler(vocab: lc.llama_vocab_p) -> ConstraintCompiler:
    return ConstraintCompiler(vocab)


def schema_format(schema: dict[str, Any]) -> ResponseFormat:
    return ResponseFormat("json_schema", schema)


def compiled(compiler: ConstraintCompiler, schema: dict[str, Any]) -> Constraint:
    constraint = compiler.compile(schema_format(schema))
    assert constraint is not None
    return constraint


def admits(compiler: ConstraintCompiler, constraint: Constraint, text: str) -> bool:
    """Whether the constraint takes ``text`` token by token and then admits nothing more."""
    for token in compiler.tokenizer().tokenize_str(text):
        constraint.accept(token)
        if constraint.error:
            return False
    return constraint.done


def token_array(n_vocab: int, favourite: int) -> tuple[Any, Any]:
    """A llama_token_data_array over the whole vocabulary whose largest logit is ``favourite``'s."""
    data = (lc.llama_token_data * n_vocab)()
    for i in range(n_vocab):
        data[i].id = lc.llama_token(i)
        data[i].logit = 0.0
    data[favourite].logit = 10.0
    array = lc.llama_token_data_array(data=data, size=n_vocab, selected=-1, sorted=False)
    return array, data


def test_free_text_needs_no_constraint(compiler: ConstraintCompiler) -> None:
    assert compiler.compile(ResponseFormat("text")) is None


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        (
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            '{"name": "Ada"}',
            '{"age": 3}',
        ),
        ({"enum": ["red", "green"]}, '"green"', '"blue"'),
        ({"type": "integer", "minimum": 0, "maximum": 99}, "42", "420"),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "null", "true"),
        ({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}, "[[], [[]]]", "[1]"),
    ],
)
def test_a_schema_admits_what_it_allows_and_nothing_else(
    compiler: ConstraintCompiler, schema: dict[str, Any], good: str, bad: str
) -> None:
    jsonschema.validate(json.loads(good), schema)
    assert admits(compiler, compiled(compiler, schema), good)
    assert not admits(compiler, compiled(compiler, schema), bad)


def test_json_object_admits_an_object_only(compiler: ConstraintCompiler) -> None:
    assert admits(compiler, compiler.compile(ResponseFormat("json_object")) or pytest.fail(), '{"a": [1, "x"]}')
    assert not admits(compiler, compiler.compile(ResponseFormat("json_object")) or pytest.fail(), "[1]")


@pytest.mark.parametrize("name", BOMBS)
def test_the_schema_bombs_compile_and_constrain(compiler: ConstraintCompiler, name: str) -> None:
    schema = BOMBS[name]
    good = {"long string": '"hello"', "long array": "[1, 2]", "long pattern": '"aaaa"'}[name]
    jsonschema.validate(json.loads(good), schema)
    assert admits(compiler, compiled(compiler, schema), good)


def test_the_string_bomb_still_bounds_the_length(compiler: ConstraintCompiler) -> None:
    constraint = compiled(compiler, {"type": "string", "maxLength": 5})
    assert not admits(compiler, constraint, '"abcdef"')


def test_large_but_ordinary_schemas_compile(compiler: ConstraintCompiler) -> None:
    properties = {f"p{i}": {"type": "integer"} for i in range(2000)}
    assert compiled(compiler, {"type": "object", "properties": properties})
    assert admits(compiler, compiled(compiler, {"enum": [f"v{i}" for i in range(10000)]}), '"v9999"')


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "string", "pattern": "^((x{1000}){1000}){1000}$"}, "too many expressions"),
        ({"type": "object", "properties": {"x": {"$ref": "#/definitions/missing"}}}, "/definitions/missing"),
        ({"type": "nosuch"}, "nosuch"),
        ({"type": "string", "pattern": "[[["}, "regex"),
        ({"not": {"type": "string"}}, "not"),
        ({"type": "string", "format": "nosuchformat"}, "nosuchformat"),
    ],
)
def test_a_schema_that_cannot_be_enforced_is_refused_naming_why(
    compiler: ConstraintCompiler, schema: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        compiler.compile(schema_format(schema))
    assert caught.value.param == SCHEMA_PARAM
    assert named in caught.value.message


@pytest.mark.parametrize("depth", [200, 5000])
def test_a_deeply_nested_schema_is_refused(compiler: ConstraintCompiler, depth: int) -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    with pytest.raises(InvalidRequest) as caught:
        compiler.compile(schema_format(schema))
    assert caught.value.param == SCHEMA_PARAM


def test_a_limit_hit_mid_generation_fails_the_request_not_the_process(compiler: ConstraintCompiler) -> None:
    constraint = compiled(compiler, {"type": "string", "pattern": "^(a{0,1000}){0,1000}$"})
    text = constraint.text_stream(())
    tokens = compiler.tokenizer().tokenize_str('"' + "a" * 2000)
    with pytest.raises(GenerationFailed, match="constraint failed"):
        for token in tokens:
            constraint.accept(token)
            text.push(b"")


def test_the_text_stream_stops_when_the_grammar_is_complete(compiler: ConstraintCompiler) -> None:
    constraint = compiled(compiler, {"enum": ["yes"]})
    text = constraint.text_stream(())
    out = ""
    for token in compiler.tokenizer().tokenize_str('"yes"'):
        assert not text.stopped
        constraint.accept(token)
        out += text.push(compiler.tokenizer().decode_bytes([token]))
    assert text.stopped
    assert out == '"yes"'


def test_the_sampler_masks_forbidden_tokens_and_is_freed_with_its_chain(
    compiler: ConstraintCompiler, vocab: lc.llama_vocab_p
) -> None:
    n_vocab = int(lc.llama_vocab_n_tokens(vocab))
    tokenizer = compiler.tokenizer()
    constraint = compiled(compiler, {"type": "array", "items": {"type": "integer"}})
    chain = build_sampler(n_vocab, SamplingParams(temperature=0), constraint)
    assert len(constraint_module._live) >= 1
    try:
        letter = tokenizer.tokenize_str("x")[0]  # the model's favourite, which the grammar forbids
        array, _data = token_array(n_vocab, letter)
        lc.llama_sampler_apply(chain, ctypes.byref(array))
        chosen = array.data[array.selected].id
        assert tokenizer.decode_str([chosen]).startswith("[")
        lc.llama_sampler_accept(chain, chosen)
        assert not constraint.error
    finally:
        lc.llama_sampler_free(chain)
    assert all(c is not constraint for c in constraint_module._live.values())


def test_after_a_failure_the_sampler_never_picks_the_end(compiler: ConstraintCompiler, vocab: lc.llama_vocab_p) -> None:
    n_vocab = int(lc.llama_vocab_n_tokens(vocab))
    constraint = compiled(compiler, {"type": "string"})
    constraint.error = "a limit was hit"
    eos = int(lc.llama_vocab_eos(vocab))
    array, data = token_array(n_vocab, eos)
    constraint.apply(array)
    logits = np.array([data[i].logit for i in range(n_vocab)])
    assert logits[eos] == -np.inf
    assert np.isfinite(logits).sum() == n_vocab - np.isinf(logits).sum() > 0


def test_the_mask_follows_the_token_ids_whatever_their_order(
    compiler: ConstraintCompiler, vocab: lc.llama_vocab_p
) -> None:
    n_vocab = int(lc.llama_vocab_n_tokens(vocab))
    bracket = compiler.tokenizer().tokenize_str("[")[0]
    constraint = compiled(compiler, {"type": "array"})
    array, data = token_array(n_vocab, 0)
    for i in range(n_vocab):  # the ids reversed, as a sampler before this one might have left them
        data[i].id = lc.llama_token(n_vocab - 1 - i)
    constraint.apply(array)
    finite = {data[i].id for i in range(n_vocab) if np.isfinite(data[i].logit)}
    assert bracket in finite
    assert compiler.tokenizer().tokenize_str("x")[0] not in finite
