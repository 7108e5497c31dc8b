"""Tool calls read out of generated text however it is split into chunks, and tools put into prompts."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from localinfer.backends.base import ModelFacts
from localinfer.engine.templates import ChatTemplate
from localinfer.engine.tools import ToolCallReader, required_call
from localinfer.types import ChatMessage, GenerationOptions, Tool, ToolCall

NAMES = frozenset({"get_weather", "read_file"})
WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def read(pieces: list[str]) -> tuple[str, tuple[ToolCall, ...]]:
    reader = ToolCallReader(NAMES)
    sent = "".join(reader.feed(p) for p in pieces)
    held, calls = reader.finish()
    return sent + held, calls


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


REPLIES = [
    (f"<tool_call>\n{WEATHER}\n</tool_call>", "", [("get_weather", {"city": "Paris"})]),
    (f"Let me check.\n<tool_call>\n{WEATHER}\n</tool_call>", "Let me check.", [("get_weather", {"city": "Paris"})]),
    (
        f'<tool_call>{WEATHER}</tool_call><tool_call>{{"name": "read_file", "arguments": {{"path": "a.py"}}}}'
        "</tool_call>",
        "",
        [("get_weather", {"city": "Paris"}), ("read_file", {"path": "a.py"})],
    ),
    (f"[TOOL_CALLS] [{WEATHER}]", "", [("get_weather", {"city": "Paris"})]),
    ('{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [("get_weather", {"city": "Paris"})]),
    ('{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', "", [("get_weather", {"city": "Paris"})]),
]


@given(st.sampled_from(REPLIES), st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_calls_are_found_however_the_reply_is_split(reply: tuple[str, str, list[object]], cuts: list[int]) -> None:
    text, before, expected = reply
    content, calls = read(split(text, cuts))
    assert content.rstrip() == before  # what came before the call, sent as text
    assert [(c.name, c.arguments) for c in calls] == expected
    assert len({c.id for c in calls}) == len(calls)


NOT_CALLS = [
    "Paris is the capital of France.",
    '{"city": "Paris"}',  # JSON, but not a call
    '<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',  # a function that does not exist
    "<tool_call>not json</tool_call>",
    "I like <tool> tags and [TOOL] words.",
    "a < b and c > d",
]


@given(st.sampled_from(NOT_CALLS), st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_a_reply_that_is_no_call_is_all_text(text: str, cuts: list[int]) -> None:
    assert read(split(text, cuts)) == (text, ())


def test_plain_text_streams_at_once_and_only_a_possible_marker_is_held() -> None:
    reader = ToolCallReader(NAMES)
    assert reader.feed("Hello there") == "Hello there"
    assert reader.feed(", see <tool") == ", see "  # might become <tool_call>
    assert reader.feed("s>") == "<tools>"
    assert reader.finish() == ("", ())


def facts(template: str | None) -> ModelFacts:
    return ModelFacts(
        n_ctx=2048,
        n_ctx_train=2048,
        chat_template=template,
        bos_token="",
        eos_token="",
        add_bos=False,
        has_chatml_tokens=True,
        architecture="llama",
        n_params=1,
    )


WEATHER_TOOL = Tool(
    "get_weather", "The weather in a city", {"type": "object", "properties": {"city": {"type": "string"}}}
)
CALL = ToolCall("call_1", "get_weather", {"city": "Paris"})
TURNS = (
    ChatMessage("user", "Weather in Paris?"),
    ChatMessage("assistant", "", tool_calls=(CALL,)),
    ChatMessage("tool", "18 C and sunny", tool_call_id="call_1", name="get_weather"),
)


def test_a_template_without_tools_gets_them_described_and_the_turns_written_back() -> None:
    text = ChatTemplate(facts(None)).render(TURNS, (WEATHER_TOOL,)).text
    assert text.index("<tools>\n{") < text.index('"name": "get_weather"') < text.rindex("</tools>")
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n18 C and sunny\n</tool_response>" in text


def test_a_template_that_knows_tools_renders_them_itself() -> None:
    template = (
        "{% for t in tools %}TOOL {{ t.function.name }}\n{% endfor %}"
        "{% for m in messages %}{{ m.role }}: {{ m.content }}"
        "{% for c in m.tool_calls or [] %} CALL {{ c.function.name }} {{ c.function.arguments | tojson }}{% endfor %}"
        "\n{% endfor %}"
    )
    text = ChatTemplate(facts(template)).render(TURNS, (WEATHER_TOOL,)).text
    assert text.startswith("TOOL get_weather\n")
    assert 'CALL get_weather {"city": "Paris"}' in text
    assert "tool: 18 C and sunny" in text


def test_a_required_call_is_constrained_to_the_named_functions_arguments() -> None:
    schema = required_call(GenerationOptions(), (WEATHER_TOOL,), "get_weather").schema
    assert schema is not None
    assert schema["properties"]["name"] == {"const": "get_weather"}
    assert schema["properties"]["arguments"] == WEATHER_TOOL.parameters
    assert json.loads(WEATHER)["name"] == "get_weather"
