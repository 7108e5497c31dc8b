"""Modelfiles read and written as Ollama's parser/parser.go reads and writes them, and the Go templates they carry
translated to Jinja that renders as Ollama renders them (through the engine's own template renderer)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localinfer.backends.base import ModelFacts
from localinfer.engine.templates import chat_template
from localinfer.errors import ModelfileError
from localinfer.models.gotemplate import NotTranslatable, is_go_template, to_jinja
from localinfer.models.modelfile import Command, parse, write
from localinfer.types import ChatMessage, Tool, ToolCall

EVERY_INSTRUCTION = '''# made by hand
FROM ./base.gguf
ADAPTER ./lora.gguf
parameter temperature 0.3
PARAMETER stop "<|im_end|>"
PARAMETER stop END
PARAMETER num_ctx 1024
SYSTEM """You are terse.
  Keep it short."""
TEMPLATE "{{ .Prompt }}"
MESSAGE user Is it hot?
MESSAGE assistant "No."
LICENSE MIT
'''


def test_every_instruction_parses_to_a_typed_command_with_its_line() -> None:
    commands = parse(EVERY_INSTRUCTION)
    assert [(c.instruction, c.key, c.value, c.line) for c in commands] == [
        ("FROM", "", "./base.gguf", 2),
        ("ADAPTER", "", "./lora.gguf", 3),
        ("PARAMETER", "temperature", "0.3", 4),
        ("PARAMETER", "stop", "<|im_end|>", 5),
        ("PARAMETER", "stop", "END", 6),
        ("PARAMETER", "num_ctx", "1024", 7),
        ("SYSTEM", "", "You are terse.\n  Keep it short.", 8),
        ("TEMPLATE", "", "{{ .Prompt }}", 10),
        ("MESSAGE", "user", "Is it hot?", 11),
        ("MESSAGE", "assistant", "No.", 12),
        ("LICENSE", "", "MIT", 13),
    ]


def test_what_is_written_parses_back_to_the_same_commands() -> None:
    commands = parse(EVERY_INSTRUCTION)
    again = parse(write(commands))
    assert [(c.instruction, c.key, c.value) for c in again] == [(c.instruction, c.key, c.value) for c in commands]


texts = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\r"), max_size=40)


@given(system=texts.map(lambda t: t.replace("\x0b", "")), newline=st.booleans())
def test_any_system_text_survives_a_write_and_a_parse(system: str, newline: bool) -> None:
    text = system + ("\nmore" if newline else "")
    commands = (Command("FROM", "base"), Command("SYSTEM", text))
    try:
        written = write(commands)
    except ModelfileError:  # only a text no quoting can carry is refused: three quotes that end a line in it
        assert '"""\n' in text + "\n"
        return
    assert parse(written)[1].value == text


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("FROM base\nFROBNICATE 1\n", 2, "unknown instruction 'FROBNICATE'"),
        ("SYSTEM hi\n", 0, "no FROM line"),
        ("FROM base\nPARAMETER temperature hot\n", 2, "PARAMETER temperature takes a number, not 'hot'"),
        ("FROM base\nPARAMETER num_ctx 2.5\n", 2, "PARAMETER num_ctx takes an integer"),
        ("FROM base\n\nPARAMETER mirostat 1\n", 3, "PARAMETER mirostat is not supported"),
        ("FROM base\nPARAMETER warp 9\n", 2, "PARAMETER 'warp' is not a parameter"),
        ("FROM base\nMESSAGE tool hi\n", 2, "MESSAGE role 'tool' is not one of system, user, assistant"),
        ('FROM base\nSYSTEM """open\nnever closed\n', 2, '"""'),
        ("FROM base\nDRAFT small\n", 2, "DRAFT is not supported"),
        ("FROM\n", 1, "FROM needs a value"),
    ],
)
def test_a_modelfile_that_cannot_make_a_model_is_refused_naming_its_line(text: str, line: int, says: str) -> None:
    with pytest.raises(ModelfileError) as caught:
        parse(text)
    assert caught.value.line == line
    assert says in caught.value.message
    assert caught.value.hint


# -- Go templates --------------------------------------------------------------------------------------------

FACTS = ModelFacts(
    n_ctx=512,
    n_ctx_train=512,
    chat_template=None,
    bos_token="<s>",
    eos_token="</s>",
    add_bos=False,
    has_chatml_tokens=True,
    architecture="llama",
    n_params=1,
)
CHAT = (
    ChatMessage("system", "Be brief."),
    ChatMessage("user", "Hi"),
    ChatMessage("assistant", "Hello!"),
    ChatMessage("user", "Bye"),
)
CHATML = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
    "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
)
# the forms of Ollama's library templates: messages ranged with an index and a $last, and the older per-turn form
MESSAGES_FORM = """{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
<|im_start|>{{ .Role }}
{{ .Content }}{{ if not $last }}<|im_end|>
{{ end }}
{{- if and (eq .Role "user") $last }}<|im_end|>
<|im_start|>assistant
{{ end }}
{{- end }}"""
PER_TURN_FORM = """{{ if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ if .Prompt }}<|im_start|>user
{{ .Prompt }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ .Response }}<|im_end|>
"""
TOOLS_FORM = """{{- if .System }}S:{{ .System }}
{{ end }}{{- with .Tools }}{{ range . }}- {{ .Function.Name }}: {{ .Function.Description }}
{{ end }}{{ end }}
{{- range .Messages }}{{ if eq .Role "user" }}U:{{ .Content }}
{{ else if eq .Role "assistant" }}A:{{ range .ToolCalls }}{{ .Function.Name }}{{ json .Function.Arguments }}{{ else }}\
{{ .Content }}{{ end }}
{{ end }}{{ end }}A:"""


def render(go: str, messages: tuple[ChatMessage, ...], tools: tuple[Tool, ...] = ()) -> str:
    assert is_go_template(go)
    return chat_template(FACTS, to_jinja(go)).render(messages, tools).text


@pytest.mark.parametrize("form", [MESSAGES_FORM, PER_TURN_FORM])
def test_ollamas_template_forms_render_as_ollama_renders_them(form: str) -> None:
    assert render(form, CHAT) == CHATML


def test_tools_and_calls_are_read_through_their_fields() -> None:
    called = ChatMessage("assistant", "", tool_calls=(ToolCall("c", "f", {"x": 1}),))
    text = render(TOOLS_FORM, (CHAT[0], CHAT[1], called), (Tool("f", "does f"),))
    assert text == 'S:Be brief.\n- f: does f\nU:Hi\nA:f{"x": 1}\nA:'


def test_a_tool_printed_whole_is_its_json_as_ollama_prints_it() -> None:
    go = "{{ range $.Tools }}{{ . }}\n{{ end }}{{ range .Messages }}{{ .Content }}{{ end }}"
    text = render(go, (CHAT[1],), (Tool("f", "does f"),))
    tool, rest = text.split("\n", 1)
    # the tool's fields in the order Ollama's struct writes them (type, then the function's name, description,
    # parameters), through the renderer's tojson, as llama.cpp's renderer writes JSON (engine/template_env.py)
    assert list(json.loads(tool)) == ["type", "function"]
    assert list(json.loads(tool)["function"]) == ["name", "description", "parameters"]
    assert json.loads(tool)["function"]["description"] == "does f" and rest == "Hi"


def test_jinja_is_not_taken_for_go() -> None:
    assert not is_go_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert not is_go_template("{{ bos_token }}{{ messages[0].content }}")


@pytest.mark.parametrize(
    ("go", "construct"),
    [
        ('{{ template "x" . }}', "{{ template }}"),
        ('{{ printf "%s" .Prompt }}', "{{ printf ... }}"),
        ("{{ .Images }}", "the field .Images"),
        ("{{ if .System }}x", "{{ if }} without {{ end }}"),
        ("{{ if .System }}{{ .Response }}{{ end }}", "{{ .Response }} inside a block"),
    ],
)
def test_a_go_construct_with_no_translation_is_named(go: str, construct: str) -> None:
    with pytest.raises(NotTranslatable) as caught:
        to_jinja(go)
    assert caught.value.construct == construct
