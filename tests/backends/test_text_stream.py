from __future__ import annotations

from localinfer.backends.text_stream import TextStream


def feed(stream: TextStream, pieces: list[bytes]) -> str:
    return "".join(stream.push(p) for p in pieces)


def test_text_without_stop_strings_passes_through() -> None:
    stream = TextStream(())
    assert feed(stream, [b"Hello", b" world"]) + stream.flush() == "Hello world"


def test_a_stop_string_cuts_the_text_before_it() -> None:
    stream = TextStream(("END",))
    assert feed(stream, [b"one two ", b"EN", b"D three"]) == "one two "
    assert stream.stopped
    assert stream.flush() == ""


def test_a_partial_stop_string_is_held_back_until_settled() -> None:
    stream = TextStream(("\nUser:",))
    assert stream.push(b"Hi there\nUs") == "Hi there"
    assert stream.push(b"ually yes") == "\nUsually yes"
    assert not stream.stopped


def test_held_back_text_is_released_at_the_end() -> None:
    stream = TextStream(("STOP",))
    assert stream.push(b"a ST") == "a "
    assert stream.flush() == "ST"


def test_a_character_split_across_tokens_is_sent_whole() -> None:
    stream = TextStream(())
    euro = "€".encode()
    assert stream.push(euro[:1]) == ""
    assert stream.push(euro[1:]) == "€"


def test_the_earliest_of_several_stop_strings_wins() -> None:
    stream = TextStream(("b", "a"))
    assert stream.push(b"xxab") == "xx"


def test_the_stop_string_that_ended_the_text_is_named() -> None:
    stream = TextStream(("\n\n", "END", "STOP"))
    assert stream.stop_word is None
    assert feed(stream, [b"one STOP two END"]) == "one "
    assert stream.stop_word == "STOP"
