from __future__ import annotations

import pytest

from localinfer.backends.base import ModelFacts
from localinfer.engine.templates import ChatTemplate
from localinfer.errors import InvalidRequest
from localinfer.types import ChatMessage


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


def test_a_template_that_writes_bos_gets_no_second_one_from_the_tokenizer() -> None:
    rendered = ChatTemplate(facts("{{ bos_token }}{{ messages[0].content }}")).render(USER)
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
