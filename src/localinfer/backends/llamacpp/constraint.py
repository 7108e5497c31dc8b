"""Constrained output through llguidance: a JSON schema, or a GBNF grammar (llama.cpp's, converted to llguidance's
Lark dialect), becomes a matcher that yields a token mask per step, applied as a sampler in llama.cpp's chain.

Compiling is bounded: llguidance builds its lexer lazily under fuel limits, and the compile (which the backend
runs in a worker thread, off the event loop) computes the first mask and the one after the bytes the grammar
forces at the start, so a schema whose regexes explode there is refused with a 400 instead of stalling the
inference thread. A limit hit later, mid-generation, fails that request only (GenerationFailed).

The sampler's C side holds a key, not a Python object: one set of ctypes callbacks, made once for the process,
finds the constraint in a registry, and the chain's ``free`` of the sampler removes it from there. So nothing
the C side calls can be garbage-collected while the chain lives, and nothing outlives it.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import logging
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import llama_cpp.llama_cpp as lc
import llguidance
import numpy as np
import numpy.typing as npt
from llguidance.llamacpp import lltokenizer_from_vocab

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

from localinfer.backends.text_stream import TextStream
from localinfer.errors import GenerationFailed, InvalidRequest
from localinfer.types import ResponseFormat

log = logging.getLogger(__name__)

SCHEMA_PARAM = "response_format.json_schema.schema"
GRAMMAR_PARAM = "grammar"  # llama-server's field for a GBNF grammar

# llguidance's defaults allow 1,000,000 units of lexer fuel for building regexes: seconds and hundreds of MiB
# for a pattern such as ((x{1000}){1000}){1000} on a small CPU. A fifth of that keeps the worst case near a
# quarter of a second and 40 MiB; ordinary schemas (thousands of properties or enum values) stay far below it.
INITIAL_LEXER_FUEL = 200_000
MAX_LEXER_STATES = 50_000  # about 1-2 KiB each

# Compact JSON: one space after ',' and ':', no other whitespace, so a small model cannot stall in a run of
# newlines. Applied over anything the schema's own "x-guidance" says.
JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _limits() -> llguidance.LLParserLimits:
    return llguidance.LLParserLimits(
        initial_lexer_fuel=INITIAL_LEXER_FUEL, max_lexer_states=MAX_LEXER_STATES, verbose_errors=False
    )


class ConstraintCompiler:
    """Compiles response formats for one loaded model. Its tokenizer view (about a second to build) is made on
    first use and kept for the model's lifetime; the compiler must be dropped before the model is freed."""

    def __init__(self, vocab: lc.llama_vocab_p) -> None:
        """Cheap: nothing is read from the vocabulary until the first compile (in its worker thread)."""
        self._vocab = vocab
        self._n_vocab = int(lc.llama_vocab_n_tokens(vocab))
        self._eog: list[int] = []
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()

    def tokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's view of the vocabulary, built once (thread-safe); every end-of-generation token ends."""
        with self._lock:
            if self._tokenizer is None:
                self._eog = [t for t in range(self._n_vocab) if lc.llama_vocab_is_eog(self._vocab, t)]
                with warnings.catch_warnings():  # it reads token attributes through a deprecated call
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self._tokenizer = lltokenizer_from_vocab(self._vocab, eos_token=self._eog or None)
            return self._tokenizer

    def compile(self, response_format: ResponseFormat) -> Constraint | None:
        """The constraint for ``response_format``, or None for free text. Blocking (up to a few hundred ms for
        a hostile schema, a second on first use): call it from a worker thread.

        Raises InvalidRequest naming ``response_format.json_schema.schema`` when the schema is invalid, uses
        something llguidance does not implement, or is too large or complex to enforce within the limits; naming
        ``grammar`` when a GBNF grammar is.
        """
        if response_format.type == "text":
            return None
        is_grammar = response_format.type == "grammar"
        refused = _grammar_refused if is_grammar else _refused
        source = response_format.grammar if is_grammar else _schema_text(response_format)
        tokenizer = self.tokenizer()
        try:
            thinking = None if is_grammar else self._thinking_tokens(response_format)
            harmony = None if is_grammar else self._harmony_tokens(response_format)
            if is_grammar:
                grammar = _from_gbnf(source)
            elif harmony is not None:
                grammar = _after_analysis(source, harmony, inside=response_format.thinking_open)
            elif thinking is not None:
                grammar = _after_thinking(source, *thinking, inside=response_format.thinking_open)
            else:
                grammar = llguidance.LLMatcher.grammar_from_json_schema(source, overrides=JSON_OPTIONS)
            matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=_limits())
            _probe(matcher, refused)
            constraint = Constraint(matcher, self._n_vocab, self._eog)
            constraint.prime()
        except InvalidRequest:
            raise
        except BaseException as exc:  # ValueError for a bad schema; a Rust panic arrives as a BaseException
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise refused(str(exc)) from exc
        if constraint.error:
            raise refused(constraint.error)
        return constraint

    def _thinking_tokens(self, response_format: ResponseFormat) -> tuple[int, int] | None:
        """The ids of the thinking markers the JSON comes after, when each is one token (else None: the JSON is
        held from the first token, as for a model that does not think)."""
        markers = response_format.after_thinking
        if markers is None or markers.harmony:
            return None
        ids = [_tokens(self._vocab, marker) for marker in (markers.open, markers.close)]
        return (ids[0][0], ids[1][0]) if all(len(i) == 1 for i in ids) else None

    def _harmony_tokens(self, response_format: ResponseFormat) -> dict[str, int] | None:
        """The ids of a harmony model's (gpt-oss's) tokens the JSON's final message comes after, by name."""
        markers = response_format.after_thinking
        if markers is None or not markers.harmony:
            return None
        ids = {name: _tokens(self._vocab, f"<|{name}|>") for name in ("start", "channel", "message", "end")}
        return {name: i[0] for name, i in ids.items()} if all(len(i) == 1 for i in ids.values()) else None


def _tokens(vocab: lc.llama_vocab_p, text: str) -> list[int]:
    data = text.encode("utf-8")
    buf = (lc.llama_token * (len(data) + 8))()
    n = lc.llama_tokenize(vocab, data, len(data), buf, len(data) + 8, False, True)
    return list(buf[: max(n, 0)])


def _after_thinking(schema: str, open_id: int, close_id: int, *, inside: bool) -> str:
    """llguidance's grammar for JSON matching ``schema`` after a reasoning model's thinking: any text up to the
    closing marker (its token), which the prompt opened (``inside``) or the model may open, then the JSON. The
    markers are written as their token ids: llguidance keeps such tokens out of the text it matches."""
    options = {**json.loads(schema), "x-guidance": JSON_OPTIONS}
    thinking = f"THOUGHT <[{close_id}]>" if inside else f"(<[{open_id}]> THOUGHT <[{close_id}]>)?"
    return llguidance.grammar_from(
        "lark",
        f"%llguidance {{}}\nstart: {thinking} SPACE answer\nTHOUGHT: /(?s:.*)/\nSPACE: /[ \\t\\n]*/\n"
        f"answer: %json {json.dumps(options)}\n",
    )


def _after_analysis(schema: str, ids: dict[str, int], *, inside: bool) -> str:
    """llguidance's grammar for a harmony model's JSON matching ``schema``: its thinking on the analysis channel
    (which the prompt opened, ``inside``, or the model may write), then the JSON as its final message."""
    options = {**json.loads(schema), "x-guidance": JSON_OPTIONS}
    start, channel, message, end = (f"<[{ids[name]}]>" for name in ("start", "channel", "message", "end"))
    analysis = f'THOUGHT {end} {start} "assistant"'
    if not inside:
        analysis = f'({channel} "analysis" {message} {analysis})?'
    return llguidance.grammar_from(
        "lark",
        f'%llguidance {{}}\nstart: {analysis} {channel} "final" {message} answer\nTHOUGHT: /(?s:.*)/\n'
        f"answer: %json {json.dumps(options)}\n",
    )


def _from_gbnf(text: str) -> str:
    """llguidance's grammar for a GBNF grammar (one already in llguidance's Lark dialect is taken as it is).
    Raises InvalidRequest naming ``grammar`` when it cannot be read."""
    if not text.strip():
        raise InvalidRequest("the grammar is empty", param=GRAMMAR_PARAM)
    try:
        return llguidance.grammar_from("gbnf", text)
    except (ValueError, RecursionError) as exc:
        reason = str(exc).removeprefix("Failed to convert the grammar from GBNF to Lark: ")
        raise _grammar_refused(reason) from exc


def _probe(matcher: llguidance.LLMatcher, refused: Callable[[str], InvalidRequest]) -> None:
    """Walk a copy of the matcher through the bytes the grammar forces at the start (such as the quote that
    opens a string) and compute the mask after them: a regex that explodes mostly shows there, so it is paid
    for by the compile, in its worker thread, and refused, rather than by a step of the inference thread.

    Raises InvalidRequest when a limit is hit. A limit first hit later still fails only its own request.
    """
    if matcher.is_error():
        raise refused(matcher.get_error())
    probe = matcher.deep_copy()
    forced = probe.compute_ff_tokens()
    if forced and probe.consume_tokens(forced) and not probe.is_stopped():
        probe.compute_bitmask()
    if probe.is_error():
        raise refused(probe.get_error())


def _schema_text(response_format: ResponseFormat) -> str:
    if response_format.type == "json_object":
        return '{"type": "object"}'
    schema = response_format.schema if response_format.schema is not None else {}
    if not isinstance(schema, dict):
        raise InvalidRequest("the JSON schema must be an object", param=SCHEMA_PARAM)
    try:
        return json.dumps(schema, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidRequest(f"the JSON schema cannot be read: {exc}", param=SCHEMA_PARAM) from exc


def _refused(reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"the JSON schema cannot be enforced: {_first_line(reason)}",
        param=SCHEMA_PARAM,
        hint="simplify the schema: fewer or smaller nested repetitions and patterns, supported keywords only",
    )


def _grammar_refused(reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"the grammar cannot be enforced: {_first_line(reason)}",
        param=GRAMMAR_PARAM,
        hint="write it in GBNF, llama.cpp's grammar format, with a root rule",
    )


def _first_line(reason: str) -> str:
    return (reason.strip().splitlines()[0] if reason.strip() else "unknown error")[:500]


class Constraint:
    """One request's matcher, its mask buffer and the sampler state llama.cpp calls back into.

    ``error`` is set (never raised from a callback) when the matcher fails; ``done`` when the grammar admits
    nothing more. Touched by the inference thread only, once compiled.
    """

    def __init__(self, matcher: llguidance.LLMatcher, n_vocab: int, eog: list[int]) -> None:
        self._matcher = matcher
        self._n_vocab = n_vocab
        self._eog = np.asarray(eog, dtype=np.int64)
        self._mask: npt.NDArray[np.int32] = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self._primed = False
        self._views: tuple[tuple[int, int], npt.NDArray[np.int32], npt.NDArray[np.float32]] | None = None
        self.error = matcher.get_error() if matcher.is_error() else ""

    @property
    def done(self) -> bool:
        """The grammar is complete and admits no further token (end-of-generation aside)."""
        if self.error:
            return False
        try:
            return self._matcher.is_stopped()
        except BaseException as exc:  # a Rust panic arrives as a BaseException: fail the request, not the thread
            self.error = f"internal error: {exc}"
            return False

    def prime(self) -> None:
        """Compute the mask for the first token now (its cost is the compile's)."""
        if not self.error:
            self._compute_mask()
            self._primed = True

    def _compute_mask(self) -> None:
        self._matcher.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
        if self._matcher.is_error():
            self.error = self._matcher.get_error()

    def apply(self, cur_p: lc.llama_token_data_array) -> None:
        """Set the logit of every token the grammar forbids to -inf. After an error, forbid only the
        end-of-generation tokens, so the step goes on to the check that fails the request."""
        if not self.error:
            if self._primed:
                self._primed = False
            else:
                self._compute_mask()
        size = int(cur_p.size)
        if size == 0:
            return
        ids, logits = self._view(ctypes.cast(cur_p.data, ctypes.c_void_p).value or 0, size)
        if self.error:
            logits[np.isin(ids, self._eog)] = -np.inf
            return
        if not self._mask.any():  # cannot happen with a sound matcher; never leave the sampler nothing to pick
            self.error = "the grammar admits no token here"
            return
        allowed = np.unpackbits(self._mask.view(np.uint8), bitorder="little").view(np.bool_)
        # First in the chain (build_sampler puts it there), the array is llama_sampler_sample's: every token, in
        # id order. That is recognised by its ends, so the common case costs one pass over the logits.
        if size == self._n_vocab and not cur_p.sorted and ids[0] == 0 and ids[-1] == size - 1:
            keep = allowed[:size]
        else:
            keep = np.take(allowed, ids)
        np.copyto(logits, np.float32(-np.inf), where=~keep)

    def _view(self, address: int, size: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
        """The ids and logits of the llama_token_data array at ``address``, as strided numpy views; the last
        pair is kept, since llama.cpp mostly hands over the same buffer step after step."""
        if self._views is None or self._views[0] != (address, size):
            buffer = (ctypes.c_float * (size * 3)).from_address(address)
            raw = np.frombuffer(memoryview(buffer).cast("B"), dtype=np.float32)
            self._views = ((address, size), raw.view(np.int32)[0::3], raw[1::3])
        return self._views[1], self._views[2]

    def accept(self, token: int) -> None:
        """Advance the matcher by the sampled token."""
        if not self.error and not self._matcher.consume_token(token):
            self.error = self._matcher.get_error() or f"token {token} is not allowed here"

    def reset(self) -> None:
        self._matcher.reset()
        self.error = self._matcher.get_error() if self._matcher.is_error() else ""
        self._primed = False

    def new_sampler(self) -> lc.llama_sampler_p:
        """A llama.cpp sampler over this constraint; the chain it is added to owns and frees it."""
        key = next(_keys)
        _live[key] = self
        sampler = lc.llama_sampler_init(ctypes.byref(_IFACE), ctypes.c_void_p(key))
        if not sampler:
            _live.pop(key, None)
            raise GenerationFailed("llama.cpp could not create the constraint sampler")
        return sampler  # type: ignore[no-any-return]

    def text_stream(self, stop: tuple[str, ...]) -> ConstrainedText:
        return ConstrainedText(stop, self)


class ConstrainedText(TextStream):
    """A text stream that also ends when the grammar is complete, and fails the request when the matcher did.

    The step loop pushes each sampled token here right after sampling (the matcher has already consumed it)
    and finishes the request with "stop" once ``stopped`` is set.
    """

    def __init__(self, stop: tuple[str, ...], constraint: Constraint) -> None:
        super().__init__(stop)
        self._constraint = constraint

    def push(self, data: bytes) -> str:
        """As TextStream.push; raises GenerationFailed when the constraint failed on this or an earlier token."""
        if self._constraint.error:
            reason = self._constraint.error.strip().splitlines()[0][:500]
            raise GenerationFailed(f"the output constraint failed: {reason}")
        out = super().push(data)
        if not self.stopped and self._constraint.done:
            out += self.flush()
            self.stopped = True
        return out


# --- the C side: one interface for every constraint sampler -------------------------------------------------

_live: dict[int, Constraint] = {}
_keys = itertools.count(1)
_NAME = ctypes.create_string_buffer(b"llguidance")


def _constraint_of(smpl: Any) -> Constraint | None:
    key = smpl.contents.ctx
    return _live.get(key) if key else None


def _on_name(_smpl: Any) -> int:
    return ctypes.addressof(_NAME)


def _on_accept(smpl: Any, token: int) -> None:
    try:
        constraint = _constraint_of(smpl)
        if constraint is not None:
            constraint.accept(token)
    except BaseException as exc:  # nothing may propagate into C
        _record(smpl, exc)


def _on_apply(smpl: Any, cur_p: Any) -> None:
    try:
        constraint = _constraint_of(smpl)
        if constraint is not None:
            constraint.apply(cur_p.contents)
    except BaseException as exc:  # nothing may propagate into C
        _record(smpl, exc)


def _on_reset(smpl: Any) -> None:
    try:
        constraint = _constraint_of(smpl)
        if constraint is not None:
            constraint.reset()
    except BaseException as exc:  # nothing may propagate into C
        _record(smpl, exc)


def _on_free(smpl: Any) -> None:
    try:
        key = smpl.contents.ctx
        if key:
            _live.pop(key, None)
    except BaseException:  # nothing may propagate into C
        log.exception("freeing a constraint sampler")


def _record(smpl: Any, exc: BaseException) -> None:
    log.exception("the constraint sampler failed")
    try:
        constraint = _constraint_of(smpl)
        if constraint is not None and not constraint.error:
            constraint.error = f"internal error: {exc}"
    except BaseException:
        log.exception("recording a constraint failure")


def _interface() -> lc.llama_sampler_i:
    iface = lc.llama_sampler_i()
    iface.name = lc.llama_sampler_i_name(_on_name)
    iface.accept = lc.llama_sampler_i_accept(_on_accept)
    iface.apply = lc.llama_sampler_i_apply(_on_apply)
    iface.reset = lc.llama_sampler_i_reset(_on_reset)
    iface.clone = lc.llama_sampler_i_clone(0)
    iface.free = lc.llama_sampler_i_free(_on_free)
    return iface


# Lives as long as the process: every constraint sampler points at it, and its fields hold the callbacks.
_IFACE = _interface()
