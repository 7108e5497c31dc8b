"""OpenAI wire models: request bodies as clients send them, translated into core types here and nowhere else.

Unknown fields are accepted and ignored (``user``, ``metadata``, ``store``...), as OpenAI-compatible servers do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from localinfer.app.server.core.choices import MAX_CHOICES
from localinfer.app.server.core.defaults import default_max_tokens, default_seed, default_temperature
from localinfer.app.server.core.logit_bias import parse_logit_bias
from localinfer.app.server.core.lora import LoraWire, lora_pairs
from localinfer.app.server.core.media import joined, media_part
from localinfer.app.server.core.model_defaults import OPENAI, fill
from localinfer.app.server.core.reasoning import requested_thinking, template_variables
from localinfer.app.server.core.sampling_fields import BoundedPenalties
from localinfer.app.server.core.stops import check_stops
from localinfer.app.server.core.tools import ToolWire
from localinfer.app.server.core.wire import ClientBody, keep_alive_seconds
from localinfer.app.server.openai.tools_wire import NamedChoice, ToolCallWire, tools_to_core
from localinfer.errors import InvalidRequest
from localinfer.types import (
    ChatMessage,
    ChatRequest,
    CompletionRequest,
    GenerationOptions,
    InfillRequest,
    MediaPart,
    Priority,
    PromptEnd,
    ResponseFormat,
    Thinking,
)

MAX_TOP_LOGPROBS = 20  # as OpenAI's top_logprobs and llama-server's n_probs


class _Wire(ClientBody):
    """A body or part of one: unknown fields ignored, nulls read as absent (core/wire.py)."""


class StreamOptions(_Wire):
    include_usage: bool = False


class JsonSchemaSpec(_Wire):
    name: str = "response"
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormatWire(_Wire):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JsonSchemaSpec | None = None

    def to_core(self) -> ResponseFormat:
        if self.type == "json_schema":
            if self.json_schema is None:
                raise InvalidRequest(
                    "response_format of type json_schema needs a json_schema object",
                    param="response_format.json_schema",
                )
            return ResponseFormat("json_schema", self.json_schema.schema_)
        return ResponseFormat(self.type)


class ImageURLWire(_Wire):
    url: str
    detail: str | None = None  # OpenAI's resolution hint: the projector's own resolution is used


class InputAudioWire(_Wire):
    data: str  # base64
    format: str | None = None  # wav, mp3: the kind is read from the bytes


class ContentPart(_Wire):
    type: str
    text: str | None = None
    image_url: ImageURLWire | str | None = None
    input_audio: InputAudioWire | None = None

    def to_core(self) -> str | MediaPart:
        """The part's text, or its image or sound (core/media.py). Raises InvalidRequest."""
        if self.type == "text":
            return self.text or ""
        if self.type == "image_url" and self.image_url is not None:
            url = self.image_url if isinstance(self.image_url, str) else self.image_url.url
            return media_part(url, param="messages.content.image_url", kind="image")
        if self.type == "input_audio" and self.input_audio is not None:
            return media_part(self.input_audio.data, param="messages.content.input_audio", kind="audio")
        raise InvalidRequest(
            f"content parts of type {self.type} are not supported (text, image_url and input_audio are)",
            param="messages.content",
        )


class MessageWire(_Wire):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallWire] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None  # a reasoning model's thinking of an earlier turn, given back

    def to_core(self) -> ChatMessage:
        media: tuple[MediaPart, ...] = ()
        if isinstance(self.content, list) and any(part.type != "text" for part in self.content):
            text, media = joined([part.to_core() for part in self.content])  # as llama-server joins them
        elif isinstance(self.content, list):
            text = "".join(part.text or "" for part in self.content)
        else:
            text = self.content or ""
        return ChatMessage(
            role="system" if self.role == "developer" else self.role,
            content=text,
            tool_calls=tuple(c.to_core(i) for i, c in enumerate(self.tool_calls or ())),
            tool_call_id=self.tool_call_id,
            name=self.name,
            reasoning=self.reasoning_content,
            media=media,
        )


class _SamplingWire(_Wire, BoundedPenalties):
    """Fields shared by chat and text completions, with llama.cpp's extensions (top_k, min_p...): the sampling
    fields of core/sampling_fields.py, OpenAI's temperature and penalty ranges."""

    model: str = ""  # none: the server's default model (core/model_name.py)
    keep_alive: str | int | float | None = None  # an extension, as Ollama's: how long the model stays loaded after
    priority: Priority | None = None  # an extension: "high" goes ahead of queued requests (FIM as you type)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float = Field(default_factory=lambda: default_temperature(0.8), ge=0.0, le=2.0)  # OpenAI's range
    seed: int | None = Field(default_factory=lambda: default_seed(None), ge=-(2**63), lt=2**64)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1)
    max_tokens: int | None = Field(default_factory=lambda: default_max_tokens(None), ge=1)
    ignore_eos: bool = False
    cache_prompt: bool = True
    timings_per_token: bool = False  # llama-server's: every streamed chunk carries the timings so far
    return_progress: bool = False  # llama-server's: a stream sends the prompt's progress while it is computed
    verbose: bool = False  # llama-server's: the answer carries ``__verbose`` (as with the server's --verbose)
    logit_bias: dict[str, Any] | list[Any] | None = None  # core/logit_bias.py: OpenAI's map or llama-server's list
    grammar: str | None = None  # llama-server's extension: a GBNF grammar the text follows
    lora: list[LoraWire] | None = None  # llama-server's extension: the LoRA adapters served with (core/lora.py)

    @model_validator(mode="before")
    @classmethod
    def _model_parameters(cls, data: Any) -> Any:
        return fill(data, OPENAI)

    def _check_supported(self) -> None:
        """Fields that would change the answer and cannot be honoured are refused, never dropped."""
        if self.n > MAX_CHOICES:
            raise InvalidRequest(f"n={self.n} is more choices than one request may ask for ({MAX_CHOICES})", param="n")

    def _constraint(self, response_format: ResponseFormat) -> ResponseFormat:
        """``response_format``, or the ``grammar`` given instead. Raises InvalidRequest naming ``grammar`` when
        both are given, as llama-server refuses them."""
        if not self.grammar:
            return response_format
        if response_format.type != "text":
            raise InvalidRequest("Cannot use both json_schema and grammar", param="grammar")
        return ResponseFormat("grammar", grammar=self.grammar)

    def _n_logprobs(self) -> int | None:
        """How many most likely tokens to report beside each generated one; None: no log-probabilities."""
        return None

    def _options(self, max_tokens: int | None, response_format: ResponseFormat) -> GenerationOptions:
        self._check_supported()
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        check_stops(stops, param="stop")
        return GenerationOptions(
            sampling=self.sampling_params(seed=self.seed, logit_bias=parse_logit_bias(self.logit_bias)),
            max_tokens=max_tokens,
            stop=tuple(stops),
            response_format=self._constraint(response_format),
            ignore_eos=self.ignore_eos,
            cache_prompt=self.cache_prompt,
            refuse_max_tokens_past_context=True,  # as OpenAI and vLLM do
            logprobs=self._n_logprobs(),
            timings_per_token=self.timings_per_token and self.stream,
            return_progress=self.return_progress and self.stream,
            lora=lora_pairs(self.lora),
        )

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ReasoningWire(_Wire):
    """A reasoning model's thinking (core/reasoning.py), as llama-server and vLLM take it on chat requests (and
    llama-server on the Responses API's, which it turns into chat requests)."""

    reasoning_format: str | None = None  # none: left in the answer; auto, deepseek: in reasoning_content
    reasoning_effort: str | None = None  # given to the template; "none" turns thinking off (OpenAI's name)
    reasoning_budget_tokens: int | None = None  # thinking tokens before its end is forced (-1: no limit)
    thinking_budget_tokens: int | None = None  # llama-server's other name for it
    chat_template_kwargs: dict[str, Any] | None = None  # more variables for the chat template (enable_thinking)

    def _thinking(self, effort: str | None = None) -> Thinking:
        """The thinking asked for; ``effort`` (the Responses API's ``reasoning.effort``) in place of
        ``reasoning_effort`` when given. Raises InvalidRequest for a reasoning format we do not have."""
        effort = effort if effort is not None else self.reasoning_effort
        budget = self.reasoning_budget_tokens
        if budget is None:
            budget = self.thinking_budget_tokens
        switch = self._template_variables().get("enable_thinking")  # over --reasoning, as llama-server has it
        if switch is not None and not isinstance(switch, bool):
            raise InvalidRequest(
                f'invalid type for "enable_thinking" (expected boolean, got {type(switch).__name__})',
                param="chat_template_kwargs.enable_thinking",
            )
        return requested_thinking(
            enabled=False if effort == "none" else switch,
            budget=budget,
            effort=None if effort in (None, "none") else effort,
            reasoning_format=self.reasoning_format,
        )

    def _template_variables(self) -> dict[str, Any]:
        return template_variables(self.chat_template_kwargs)


class ChatCompletionBody(_SamplingWire, ReasoningWire):
    messages: list[MessageWire] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    response_format: ResponseFormatWire | None = None
    tools: list[ToolWire] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedChoice | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    add_generation_prompt: bool = True  # llama-server's: the prompt ends with the reply's opening
    continue_final_message: bool | str = False  # llama-server's (and vLLM's): the model goes on with the last turn

    def _n_logprobs(self) -> int | None:
        if self.top_logprobs and not self.logprobs:
            raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None

    def to_core(self) -> ChatRequest:
        if self.grammar and self.tools:  # llama-server's refusal: the tools' own grammar would be replaced
            raise InvalidRequest("Cannot use custom grammar constraints with tools.", param="grammar")
        self._check_messages()
        tools, tool_choice = tools_to_core(self.tools, self.tool_choice)
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        response_format = self.response_format.to_core() if self.response_format else ResponseFormat()
        return ChatRequest(
            model=self.model,
            messages=tuple(m.to_core() for m in self.messages),
            options=self._options(max_tokens, response_format),
            tools=tools,
            tool_choice=tool_choice,
            keep_alive=keep_alive_seconds(self.keep_alive),
            priority=self.priority or "normal",
            thinking=self._thinking(),
            template_kwargs=self._template_variables(),
            ending=self._ending(),
        )

    def _check_messages(self) -> None:
        """Raises InvalidRequest for the turns llama-server refuses: one without ``content`` (an assistant's may
        have ``tool_calls`` in its place)."""
        for message in self.messages:
            given = message.model_fields_set
            if message.role != "assistant" and "content" not in given:
                raise InvalidRequest("All non-assistant messages must contain 'content'", param="messages")
            if message.role == "assistant" and "content" not in given and "tool_calls" not in given:
                raise InvalidRequest(
                    "Assistant message must contain either 'content' or 'tool_calls'!", param="messages"
                )

    def _ending(self) -> PromptEnd:
        """How the prompt ends, as llama-server decides it: a last assistant turn is a prefill the model continues.
        Raises InvalidRequest where llama-server answers 400."""
        continues = self.continue_final_message in (True, "content", "reasoning_content")
        generation_prompt = self.add_generation_prompt
        if not continues and self.messages[-1].role == "assistant":
            if len(self.messages) >= 2 and self.messages[-2].role == "assistant":
                raise InvalidRequest(
                    "Cannot have 2 or more assistant messages at the end of the list.", param="messages"
                )
            continues, generation_prompt = True, False
        if continues and generation_prompt:
            raise InvalidRequest(
                "Cannot set both add_generation_prompt and continue_final_message to true.",
                param="add_generation_prompt",
            )
        if continues and self.messages[-1].role == "assistant" and self.messages[-1].tool_calls:
            raise InvalidRequest("Cannot continue an assistant message that contains tool calls.", param="messages")
        return "continue" if continues else "reply" if generation_prompt else "none"


class CompletionBody(_SamplingWire):
    prompt: str | list[str]
    max_tokens: int | None = Field(default_factory=lambda: default_max_tokens(16), ge=1)
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)  # the legacy API: how many most likely tokens

    def _n_logprobs(self) -> int | None:
        return self.logprobs

    suffix: str | None = None

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else self.prompt

    def to_core(self) -> list[CompletionRequest | InfillRequest]:
        """One core request per prompt (a list of prompts gives one choice each). With a ``suffix``, each is a
        fill-in-the-middle request: the text between the prompt and the suffix."""
        prompts = self.prompts
        if not prompts:
            raise InvalidRequest("prompt must not be an empty list", param="prompt")
        if len(prompts) * self.n > MAX_CHOICES:  # they all run at once: one request must not take the whole queue
            raise InvalidRequest(
                f"{len(prompts)} prompts with n={self.n} are {len(prompts) * self.n} choices; at most {MAX_CHOICES} "
                "are computed for one request",
                param="prompt",
            )
        options = self._options(self.max_tokens, ResponseFormat())
        keep_alive = keep_alive_seconds(self.keep_alive)
        if self.suffix:
            return [
                InfillRequest(
                    model=self.model,
                    prefix=p,
                    suffix=self.suffix,
                    options=options,
                    keep_alive=keep_alive,
                    priority=self.priority or "high",
                )
                for p in prompts
            ]
        return [
            CompletionRequest(
                model=self.model, prompt=p, options=options, keep_alive=keep_alive, priority=self.priority or "normal"
            )
            for p in prompts
        ]
