"""How one engine's OpenAI server is started and spoken to: a ``Recipe`` is data, the launcher and relay are shared.

A recipe says the engine's command, how it takes the model, host, port, key and served name, the route that
answers 200 once it serves, the flags the planner passes (tensor parallelism, memory fraction, max model length,
KV cache dtype), how its log says why it failed, and which request fields it honours on localinfer's own generate
path (a field it would drop is a 400 there, never dropped). ``Recipe.launch`` turns it into the ``Launch`` the
launcher runs: any command that serves OpenAI's routes on a port fits (a child ``localinfer serve`` too).

The key never goes on the command line, where any local user reads it (``ps``, ``/proc/PID/cmdline``): an engine
that reads it from the environment gets it there; one that takes it only as a flag (SGLang's ``--api-key``) is
started through ``keyed_main``, which reads it from the environment and adds the flag to ``sys.argv`` in-process
before it runs the engine's module.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localinfer.backends.engine_process.keyed_main import KEY_ENV, KEY_FLAG_PREFIX
from localinfer.errors import InvalidRequest
from localinfer.types import GenerationOptions, ResponseFormat, SamplingParams

LOCALHOST = "127.0.0.1"
KEYED_MAIN = "localinfer.backends.engine_process.keyed_main"
DEFAULT_SAMPLING = SamplingParams()


@dataclass(frozen=True)
class Launch:
    """One engine process to start: its whole command line, what it adds to the environment, and the routes that
    must answer 200 (with the key) before it counts as ready."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    ready_paths: tuple[str, ...] = ("/health", "/v1/models")


LaunchFor = Callable[[int, str], Launch]  # (port, key) -> what to run; the launcher picks both


@dataclass(frozen=True)
class PlannerFlags:
    """The engine's own names for what the planner decides; None where it has no such flag."""

    tensor_parallel: str | None = None
    memory_fraction: str | None = None
    max_model_len: str | None = None
    kv_cache_dtype: str | None = None
    max_seqs: str | None = None  # requests batched together (facts' n_slots)


@dataclass(frozen=True)
class Failure:
    """A line of the engine's log (``pattern``, a regular expression) and what it means, with what to do."""

    pattern: str
    says: str


# Generation option fields a recipe can honour on the generate path; any other non-default option is refused.
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty")


@dataclass(frozen=True)
class Recipe:
    """One engine as data (see the module's docstring). ``command()`` is the program and its fixed arguments."""

    name: str  # "vllm": what --engine and LOCALINFER_ENGINE name
    title: str  # "vLLM": how messages name it
    command: Callable[[], list[str]]
    model_flag: str | None  # "--model"; None: the model is the first argument after the command
    host_flag: str = "--host"
    port_flag: str = "--port"
    key_env: str | None = None  # where the engine reads its key from the environment (not argv: ps shows argv)
    key_flag: str | None = None  # else the flag that takes it, added in-process (keyed_main); neither: no key
    served_name_flag: str | None = None  # the name clients use; None: the engine answers to any
    fixed_args: tuple[str, ...] = ()  # always passed (after the model), e.g. telemetry off
    model_args: Callable[[Path], list[str]] = lambda folder: []  # arguments a model folder asks for
    health_path: str = "/health"
    flags: PlannerFlags = PlannerFlags()
    default_max_seqs: int = 256
    failures: tuple[Failure, ...] = ()
    honours: frozenset[str] = frozenset()  # SAMPLING_FIELDS, "seed", "stop", "max_tokens", "ignore_eos", "json"
    top_k_off: int = -1  # the top_k that turns top-k sampling off in its completion request

    def launch(self, model: str, *, served_name: str = "", extra: Sequence[str] = ()) -> LaunchFor:
        """What to run for ``model`` (a folder or repo id) under ``served_name``, with ``extra`` arguments last."""

        def for_port(port: int, key: str) -> Launch:
            argv = self._keyed_command() if self.key_flag and not self.key_env else [*self.command()]
            argv += [self.model_flag, model] if self.model_flag else [model]
            argv += [self.host_flag, LOCALHOST, self.port_flag, str(port), *self.fixed_args]
            if served_name and self.served_name_flag and not _has_flag(extra, self.served_name_flag):
                argv += [self.served_name_flag, served_name]
            env = {self.key_env or KEY_ENV: key} if self.checks_key else {}
            return Launch(tuple([*argv, *extra]), env, (self.health_path, "/v1/models"))

        return for_port

    @property
    def checks_key(self) -> bool:
        """Whether the engine itself refuses requests without its key (localinfer checks clients' keys anyway)."""
        return bool(self.key_env or self.key_flag)

    @property
    def no_key_note(self) -> str:
        """What an engine that checks no key means for this machine's other users, in one line ("" when it checks
        one)."""
        if self.checks_key:
            return ""
        return f"{self.title} checks no key: it listens on {LOCALHOST} only, but other local users can reach it"

    def _keyed_command(self) -> list[str]:
        """The command run through ``keyed_main``, which adds ``key_flag`` and the key to the engine's argv
        in-process: only a Python module (``python -m MODULE``) can be run so."""
        interpreter, *rest = self.command()
        if len(rest) != 2 or rest[0] != "-m":
            raise ValueError(f"{self.title} takes its key as {self.key_flag}: its command must be python -m MODULE")
        return [interpreter, "-m", KEYED_MAIN, KEY_FLAG_PREFIX + (self.key_flag or ""), rest[1]]

    def why_failed(self, log_text: str) -> str | None:
        """What the first known failure line in the engine's log means, None when none is known."""
        for failure in self.failures:
            if re.search(failure.pattern, log_text, re.MULTILINE):
                return failure.says
        return None

    def refuse_unhonoured(self, options: GenerationOptions) -> None:
        """Raise InvalidRequest naming the first option asked (not at its default) that this engine would drop."""
        sampling = options.sampling
        for name in SAMPLING_FIELDS:
            if name not in self.honours and getattr(sampling, name) != getattr(DEFAULT_SAMPLING, name):
                self._refuse(name)
        if sampling.seed is not None and "seed" not in self.honours:
            self._refuse("seed")
        if options.stop and "stop" not in self.honours:
            self._refuse("stop")
        if options.ignore_eos and "ignore_eos" not in self.honours:
            self._refuse("ignore_eos")
        if options.response_format.type in ("json_object", "json_schema") and "json" not in self.honours:
            self._refuse("response_format")
        if options.response_format != ResponseFormat() and options.response_format.type not in (
            "json_object",
            "json_schema",
        ):
            self._refuse("response_format")
        if options.logprobs is not None:
            self._refuse("logprobs")

    def _refuse(self, name: str) -> None:
        raise InvalidRequest(
            f"{name} is not honoured by {self.title} on this route, and localinfer does not drop it",
            param=name,
        )


def python_module(module: str) -> Callable[[], list[str]]:
    """A command running ``module`` with this interpreter (the engine installed in localinfer's environment)."""
    return lambda: [sys.executable, "-m", module]


def program(name: str) -> Callable[[], list[str]]:
    """A command running the program ``name`` from PATH (the child's PATH: the launcher's environment)."""
    return lambda: [name]


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)
