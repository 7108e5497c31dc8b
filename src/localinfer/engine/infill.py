"""The fill-in-the-middle prompt, token for token as llama-server builds it (``format_prompt_infill`` in
llama.cpp's ``tools/server/server-common.cpp``, the version llama-cpp-python 0.3.36 vendors).

With the model's own FIM tokens, never a guessed layout::

    [extra] [BOS] FIM_PRE prefix prompt FIM_SUF suffix FIM_MID

where ``extra``, for a model with repository-level tokens (``fim_rep``, ``fim_sep``), is::

    FIM_REP "myproject\\n" (FIM_SEP filename "\\n" text)... FIM_SEP "filename\\n"

and otherwise each chunk's text after a ``"\\n\\n--- snippet ---\\n\\n"`` separator. The prefix keeps its last
3/4 of a batch of tokens, the suffix its first 1/4 batch less the prompt and two tokens, and the extra chunks
their last ``n_ctx - n_batch - 2 * n_predict`` tokens, with ``n_predict`` llama-server's default of -1. Prefix,
suffix and extra text are tokenized with control tokens read as plain text; the prompt with them parsed.
"""

from __future__ import annotations

from localinfer.backends.base import Backend
from localinfer.errors import InvalidRequest
from localinfer.types import InfillRequest

# llama-server sizes the extra context with its own --n-predict (default -1), whatever the request asks for
SERVER_N_PREDICT = -1
REPO_NAME = "myproject\n"  # llama-server's: the repository's name is not an input
CURRENT_FILE = "filename\n"  # llama-server's: neither is the current file's
SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"  # between chunks, for a model without a file separator token


async def infill_tokens(backend: Backend, request: InfillRequest) -> list[int]:
    """The prompt for ``request`` on ``backend``'s loaded model, as token ids. Raises InvalidRequest when the
    model declares no fill-in-the-middle tokens (a made-up layout would only give made-up text)."""
    facts = backend.facts
    fim = facts.fim
    if not fim.can_infill:
        raise InvalidRequest(
            f"model '{request.model}' has no fill-in-the-middle tokens (tokenizer.ggml.fim_pre/suf/mid_token_id "
            "in its metadata), so it cannot fill in text between a prefix and a suffix",
            param="model",
            hint="use a code model trained for FIM (Qwen2.5-Coder, StarCoder2, CodeGemma...)",
        )

    async def plain(text: str) -> list[int]:
        return await backend.tokenize(text, add_special=False, parse_special=False)

    prefix = await plain(request.prefix)
    suffix = await plain(request.suffix)
    prompt = await backend.tokenize(request.prompt, add_special=False, parse_special=True)
    extra: list[int] = []
    if fim.rep >= 0:
        extra += [fim.rep, *await plain(REPO_NAME)]
    for filename, text in request.extra:
        if fim.sep >= 0:
            extra += [fim.sep, *await plain(filename + "\n")]
        else:
            extra += await plain(SNIPPET_SEPARATOR)
        extra += await plain(text)
    if fim.sep >= 0:
        extra += [fim.sep, *await plain(CURRENT_FILE)]

    n_batch, n_ctx = facts.n_batch, facts.n_ctx
    n_prefix_take = min(len(prefix), 3 * (n_batch // 4))
    n_suffix_take = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra_take = min(max(0, n_ctx - n_batch - 2 * SERVER_N_PREDICT), len(extra))
    head = [fim.pre, *prefix[len(prefix) - n_prefix_take :], *prompt]
    if facts.add_bos and facts.bos_id >= 0:
        head.insert(0, facts.bos_id)
    return [*extra[len(extra) - n_extra_take :], *head, fim.suf, *suffix[:n_suffix_take], fim.mid]
