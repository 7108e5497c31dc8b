"""Fifty prompts for the greedy-text tests and bench (issue #42): 25 chats and 25 raw completions, of 20 to about
2,000 tokens (SmolLM2's tokenizer), made from seeded sentences so that every run and every machine has the same
ones. Most are short, as requests are, and a few long: the i-th of n is about 20 * 100 ** ((i / (n - 1)) ** 1.5)
tokens (17k tokens in all, six of them past 1,000)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

N_PROMPTS = 50
MIN_TOKENS, MAX_TOKENS = 20, 2000
CHARS_PER_TOKEN = 5.0  # SmolLM2's tokenizer on this English

_SUBJECTS = [
    "The river",
    "An old sailor",
    "The city council",
    "A small robot",
    "My grandmother",
    "The library",
    "A storm",
    "The young engineer",
    "Every morning the baker",
    "The forest",
    "A travelling musician",
    "The lighthouse keeper",
    "Our neighbour's cat",
    "The museum",
    "A quiet student",
]
_VERBS = [
    "remembers",
    "builds",
    "watches",
    "carries",
    "explains",
    "forgets",
    "paints",
    "follows",
    "repairs",
    "describes",
    "discovers",
    "sings about",
    "writes to",
    "counts",
    "waits for",
]
_OBJECTS = [
    "the bridge over the valley",
    "a letter from the coast",
    "the first snow of winter",
    "seven copper keys",
    "the map of the northern islands",
    "a garden full of tomatoes",
    "the noise of the trains",
    "an unfinished song",
    "the price of bread",
    "the stars above the harbour",
    "a broken umbrella",
    "the history of the town",
    "the rules of chess",
    "a recipe for plum cake",
    "the evening news",
]
_TAILS = [
    "before the sun goes down.",
    "while the others sleep.",
    "with great care.",
    "for the third time.",
    "and nobody knows why.",
    "as if nothing had happened.",
    "in a language of its own.",
    "every single day.",
    "without saying a word.",
    "because the weather changed.",
]
_ASKS = [
    "Summarise the text above in one sentence.",
    "What happens next? Continue the story.",
    "Write a short poem about it.",
    "List three questions about this text.",
    "Explain it to a child.",
]


@dataclass(frozen=True)
class Prompt:
    """A chat (``messages``) or a raw completion (``prompt``), about ``tokens`` tokens long."""

    kind: str  # "chat" or "completion"
    tokens: int
    text: str
    system: str = ""

    def chat_messages(self) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, {"role": "user", "content": self.text}]


def _sentences(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    while sum(len(s) + 1 for s in out) < chars:
        out.append(f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}")
    return " ".join(out)


def corpus() -> list[Prompt]:
    rng = random.Random(42)
    prompts = []
    for i in range(N_PROMPTS):
        tokens = round(MIN_TOKENS * math.exp(math.log(MAX_TOKENS / MIN_TOKENS) * (i / (N_PROMPTS - 1)) ** 1.5))
        chars = int(tokens * CHARS_PER_TOKEN)
        if i % 2 == 0:
            system = "You are a helpful assistant who answers briefly." if i % 4 == 0 else ""
            body = _sentences(rng, max(chars - 60, 10))
            prompts.append(Prompt("chat", tokens, f"{body}\n\n{rng.choice(_ASKS)}", system))
        else:
            prompts.append(Prompt("completion", tokens, _sentences(rng, chars)))
    return prompts
