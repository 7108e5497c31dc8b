"""llama-server's n_indent and t_max_predict_ms, on text as it streams out token by token."""

from __future__ import annotations

from localinfer.backends.line_limits import LimitedTextStream, text_stream_for
from localinfer.backends.text_stream import TextStream
from localinfer.types import GenerationOptions


def run(stream: TextStream, pieces: list[str]) -> str:
    out = []
    for piece in pieces:
        out.append(stream.push(piece.encode()))
        if stream.stopped:
            break
    else:
        out.append(stream.flush())
    return "".join(out)


def test_a_line_indented_less_than_n_indent_ends_the_text_keeping_its_indentation() -> None:
    stream = LimitedTextStream((), n_indent=4)
    text = run(stream, ["x = 1\n", "    ", "y = 2\n", "  ", "z", " = 3\n"])
    assert text == "x = 1\n    y = 2\n  "
    assert stream.stopped and stream.limited


def test_the_first_line_is_never_cut_by_n_indent() -> None:
    stream = LimitedTextStream((), n_indent=4)
    assert run(stream, ["return", " x"]) == "return x"
    assert not stream.limited


def test_an_empty_line_after_the_first_ends_the_text_at_n_indent() -> None:
    stream = LimitedTextStream((), n_indent=2)
    assert run(stream, ["a\n", "\n", "  b"]) == "a\n"
    assert stream.limited


def test_indentation_is_held_back_until_the_line_shows_it_is_enough() -> None:
    stream = LimitedTextStream((), n_indent=4)
    assert stream.push(b"a\n") == "a\n"
    assert stream.push(b"    ") == ""
    assert stream.push(b"b") == "    b"
    assert not stream.stopped


def test_past_t_max_predict_ms_the_next_line_end_ends_the_text() -> None:
    now = [0.0]
    stream = LimitedTextStream((), t_max_predict_ms=100, clock=lambda: now[0])
    assert stream.push(b"one\n") == "one\n"  # in time
    now[0] = 0.5
    assert stream.push(b"two") == "two"  # late, but the line has not ended
    assert stream.push(b" three\nfour") == " three\nfour"  # the token that ends the line is kept whole
    assert stream.stopped and stream.limited
    assert stream.flush() == ""


def test_stop_strings_still_cut_before_the_limits() -> None:
    stream = LimitedTextStream(("END",), n_indent=2)
    assert run(stream, ["a\n", "  bEND", "c"]) == "a\n  b"
    assert stream.stopped and not stream.limited


def test_options_without_limits_get_a_plain_text_stream() -> None:
    assert type(text_stream_for(GenerationOptions())) is TextStream
    assert isinstance(text_stream_for(GenerationOptions(n_indent=2)), LimitedTextStream)
