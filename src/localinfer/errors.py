"""One error tree for localinfer. Every error carries a message and a hint that tells the user what to do.

The CLI prints ``message`` and ``hint`` on one line each; the server maps each class to a status and the
dialect's error shape in one table (``app/server/errors.py``). Nobody matches on message text.
"""

from __future__ import annotations


class LocalInferError(Exception):
    """Base class: ``message`` says what went wrong, ``hint`` what to do about it."""

    hint: str = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint


class ConfigError(LocalInferError):
    """Settings or command-line flags that cannot work together."""


class ModelNotFound(LocalInferError):
    """No registered model, file or package answers to ``model``."""

    def __init__(self, model: str, *, hint: str | None = None) -> None:
        super().__init__(
            f"model '{model}' not found",
            hint=hint or "run 'localinfer ls' to see the models here, or 'localinfer pull MODEL' to get one",
        )
        self.model = model


class ModelManagedElsewhere(LocalInferError):
    """The model belongs to another tool (Ollama, the HF cache, LM Studio): localinfer lists it but never deletes it."""


class ModelLoadError(LocalInferError):
    """A model file exists but the backend could not load it (corrupt, truncated, unsupported)."""


class ModelNotReady(LocalInferError):
    """The model is still loading; the request can be retried shortly."""


class PullError(LocalInferError):
    """A model could not be fetched or registered; nothing half-written is left behind."""


class HubUnreachable(PullError):
    """The Hugging Face Hub could not be reached (no network, a wrong HF_ENDPOINT, a proxy refusing)."""


class DiskFull(PullError):
    """There is not enough free disk space for a download."""


class ConvertError(LocalInferError):
    """A model could not be converted to another format; nothing half-written is left behind."""


class InvalidRequest(LocalInferError):
    """A request the model cannot serve as asked. ``param`` names the offending field, if one does."""

    def __init__(self, message: str, *, param: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.param = param


class ContextLengthExceeded(InvalidRequest):
    """The prompt does not fit in the model's context window."""

    def __init__(self, *, n_prompt: int, n_ctx: int, at_least: bool = False, param: str = "messages") -> None:
        super().__init__(
            f"the prompt has {'at least ' if at_least else ''}{n_prompt} tokens but the model's context holds {n_ctx}",
            param=param,
            hint="shorten the prompt or serve the model with a larger context (--ctx-size)",
        )
        self.n_prompt = n_prompt
        self.n_ctx = n_ctx


class Unauthorized(LocalInferError):
    """A missing or wrong API key."""


class Forbidden(LocalInferError):
    """A request this server does not take from where it came: a Host it does not answer to (DNS rebinding) or
    a browser page of an origin that is not allowed."""


class NotSupported(LocalInferError):
    """A route or feature this server was started without (``--no-slots``): llama-server's 501."""


class QueueFull(LocalInferError):
    """Every slot is busy and the waiting queue is full; retry later."""


class ServerShuttingDown(LocalInferError):
    """The server is stopping: a request it took ended unfinished, or one it can no longer take was refused."""

    def __init__(self, message: str = "the server is shutting down", *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint or "retry when the server is back")


class GenerationFailed(LocalInferError):
    """The backend failed while generating (for example, llama_decode returned an error)."""


class RpcWorkerLost(LocalInferError):
    """An RPC worker that a loaded model's layers are on stopped answering: the request on it ended, and the model
    serves again once the worker is back (``endpoint``: its ``host:port``)."""

    def __init__(self, endpoint: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(
            message,
            hint=hint
            or f"restart the worker at {endpoint} (localinfer rpc there): the next request loads the model again",
        )
        self.endpoint = endpoint


class QuantizeError(LocalInferError):
    """A model could not be quantized or measured; nothing half-written is left behind."""


class SlotFileError(LocalInferError):
    """A slot's cache could not be saved to its file (llama-server's 500 "Unable to save slot")."""


class ModelfileError(InvalidRequest):
    """A Modelfile (or ``/api/create`` body) that cannot make a model; ``line`` is its 1-based line (0: none)."""

    def __init__(self, message: str, *, line: int = 0, hint: str | None = None) -> None:
        super().__init__(f"Modelfile line {line}: {message}" if line else message, hint=hint)
        self.line = line
