from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from localinfer.backends.base import ModelFacts
from localinfer.engine.templates import ChatTemplate
from localinfer.errors import InvalidRequest
from localinfer.types import ChatMessage, Thinking


def facts(template: str | None, *, chatml: bool = False, bos: str = "<s>") -> ModelFacts:
    return ModelFacts(
        n_ctx=2048,
        n_ctx_train=2048,
        chat_template=template,
        bos_token=bos,
        eos_token="</s>",
        add_bos=True,
        has_chatml_tokens=chatml,
        architecture="llama",
        n_params=1,
    )


USER = (ChatMessage("user", "Hi"),)


def test_the_models_own_template_is_rendered_with_a_generation_prompt() -> None:
    template = (
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    rendered = ChatTemplate(facts(template)).render(USER)
    assert rendered.text == "[user]Hi[assistant]"
    assert rendered.stop == ()


def test_the_bos_text_a_template_writes_is_left_to_the_tokenizer_once() -> None:
    rendered = ChatTemplate(facts("{{ bos_token }}{{ messages[0].content }}")).render(USER)
    assert rendered.text == "Hi"  # as llama.cpp strips it: the tokenizer adds the one BOS token
    assert rendered.add_special is True


def test_for_a_model_whose_tokenizer_adds_no_bos_the_templates_bos_text_is_the_bos() -> None:
    no_bos = dataclasses.replace(facts("{{ bos_token }}{{ messages[0].content }}"), add_bos=False)
    rendered = ChatTemplate(no_bos).render(USER)
    assert rendered.text == "<s>Hi"
    assert rendered.add_special is False


def test_without_a_template_a_chatml_vocabulary_gets_chatml() -> None:
    template = ChatTemplate(facts(None, chatml=True))
    assert template.kind == "chatml-fallback"
    assert template.render(USER).text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_without_a_template_a_base_model_gets_a_transcript_that_stops_at_the_next_turn() -> None:
    template = ChatTemplate(facts(None))
    rendered = template.render((ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")))
    assert template.kind == "transcript-fallback"
    assert rendered.text == "System: Be brief.\n\nUser: Hi\n\nAssistant:"
    assert rendered.stop == ("\nUser:",)


def test_a_template_cannot_reach_python_internals() -> None:
    evil = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(InvalidRequest):
        ChatTemplate(facts(evil)).render(USER)


def test_a_template_cannot_read_files() -> None:
    with pytest.raises(InvalidRequest):
        ChatTemplate(facts("{% include '/etc/passwd' %}")).render(USER)


def test_raise_exception_in_a_template_is_an_invalid_request() -> None:
    template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(InvalidRequest, match="roles must alternate"):
        ChatTemplate(facts(template)).render(USER)


def test_a_name_nobody_sets_added_to_text_is_no_text_as_llama_cpp_reads_it() -> None:
    template = "{{ 'Functions:' + functions + '.' }}{% for t in tools %}never{% endfor %}{{ nothing.at.all }}"
    assert ChatTemplate(facts(template)).render(USER).text == "Functions:."


def test_none_added_to_text_is_no_text() -> None:
    template = "{% set ns = namespace(x=none) %}{{ 'a' + ns.x + 'b' }}"
    assert ChatTemplate(facts(template)).render(USER).text == "ab"


def test_todays_date_is_given_as_llama_cpp_gives_it() -> None:
    template = "{{ date_string }}|{{ datetime }}|{{ strftime_now('%Y') }}"
    date_string, datetime, year = ChatTemplate(facts(template)).render(USER).text.split("|")
    today = dt.datetime.now()
    assert date_string in {d.strftime("%d %b %Y") for d in (today, today - dt.timedelta(days=1))}
    assert datetime in {d.strftime("%b %d %Y") for d in (today, today - dt.timedelta(days=1))}
    assert int(year) >= 2026


def test_tojson_writes_json_as_python_does_with_nothing_escaped_for_html() -> None:
    template = "{{ {'a': '<b> & c'} | tojson }}|{{ tojson([1, 2], indent=1) }}"
    assert ChatTemplate(facts(template)).render(USER).text == '{"a": "<b> & c"}|[\n 1,\n 2\n]'


def test_add_generation_prompt_is_undefined_unless_it_is_asked_for() -> None:
    template = "{{ messages[-1].content }}{% if add_generation_prompt is defined %}[open]{% endif %}"
    assert ChatTemplate(facts(template)).render(USER).text == "Hi[open]"
    assert ChatTemplate(facts(template)).render(USER, ending="none").text == "Hi"


def test_a_last_turn_continued_is_the_turns_before_it_the_generation_prompt_and_its_text() -> None:
    template = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    chat = (*USER, ChatMessage("assistant", "Whill"))
    rendered = ChatTemplate(facts(template)).render(chat, ending="continue")
    assert rendered.text == "<user>Hi</user><assistant>Whill"


def test_enable_thinking_is_on_unless_turned_off() -> None:
    template = "{{ enable_thinking }}"
    assert ChatTemplate(facts(template)).render(USER).text == "True"
    assert ChatTemplate(facts(template)).render(USER, thinking=Thinking(enabled=False)).text == "False"


def test_a_system_turn_a_template_refuses_goes_before_the_next_turn() -> None:
    template = (
        "{% if messages[0].role == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    )
    rendered = ChatTemplate(facts(template)).render((ChatMessage("system", "Be brief."), *USER))
    assert rendered.text == "[user]Be brief.\nHi"


QWEN3_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
QWQ_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% if not enable_thinking %}</think>{% endif %}"
    "{% endif %}"
)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (QWEN3_LIKE, "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nWhill"),
        (QWQ_LIKE, "<|im_start|>assistant\n<think>hmm</think>Whill"),
    ],
    ids=["tags-around-a-turns-thinking", "tags-of-the-generation-prompt"],
)
def test_a_continued_turns_thinking_goes_between_the_templates_own_tags(template: str, expected: str) -> None:
    chat = (*USER, ChatMessage("assistant", "Whill", reasoning="hmm"))
    rendered = ChatTemplate(facts(template)).render(chat, ending="continue")  # no thinking markers in the vocabulary
    assert rendered.text.endswith(expected)
    still_thinking = ChatTemplate(facts(template)).render(
        (*USER, ChatMessage("assistant", "", reasoning="hmm")), ending="continue"
    )
    assert still_thinking.text.endswith(expected.split("hmm")[0] + "hmm")
