"""Speculative decoding: decode tok/s with and without it, against llama-server's n-gram modes or its draft model.

Engines, all started once and alive together, each on the same model file with one slot and the same threads:

- `localinfer-off`: `localinfer serve MODEL --spec off`
- `localinfer-ngram`: `localinfer serve MODEL` (prompt lookup is the default)
- `llama-server`: no speculation
- `llama-server-<type>` for each `--llama-spec` type (default: ngram-simple and ngram-mod), `--spec-type <type>`

With `--draft DRAFT.gguf` the engines compare a draft model instead: `localinfer-off`, `localinfer-draft`
(`--draft DRAFT`), `llama-server` and `llama-server-draft` (`--spec-type draft-simple -md DRAFT`, its default
draft settings). A model drafting for itself keeps every draft, so the figures then measure what drafting costs per
token.

Workloads (greedy, `ignore_eos`, `--tokens` tokens each):

- `edit`: a ~400-token Python file and "repeat it with one change" (a base model gets the file, then the start
  of its second version);
- `quote`: a document and "quote the paragraph that says ..." (base model: the paragraph's first words again);
- `chat`: free-form text the prompt does not contain, where drafts rarely pay.

Rounds alternate the engines (the order rotates each round) so a slower or busier moment of the machine hits
every engine alike; each request starts with a line naming its round, so no prompt cache shortens it. Reported
per workload and engine: the median decode tok/s (tokens after the first / time from the first to the last
streamed text), the min-max over rounds, and the ratios localinfer-ngram / localinfer-off and localinfer-ngram /
best llama-server speculative setting (localinfer-draft / llama-server-draft with --draft), each round's
ratio computed within the round. A PNG plot goes to `--plot`.

Round 0 warms the engines up on the workloads themselves, so every measured request has been answered before, by
the same servers: llama-server's ngram-mod (one table of n-grams kept across requests) and localinfer's prompt
lookup (which also searches the model's recent outputs) draft the reply from the earlier one, as they would for a
regenerated answer. With `--cold` each round starts fresh servers, warmed up on other text, so a reply can be
drafted only from its own prompt and what it has written so far.

Usage: .venv/bin/python bench/speculation.py --model PATH.gguf [--chat] [--rounds 5] [--tokens 256] [--draft D.gguf]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

from benchlib import (
    REPO_ROOT,
    RESULTS_DIR,
    ManagedServer,
    free_port,
    install_sigterm_handler,
    llama_cpp_bin,
    machine_info,
    stream_openai,
    write_json,
)

CODE = '''import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Account:
    """One customer's account: its owner, balance in cents and whether it is frozen."""

    owner: str
    balance: int = 0
    frozen: bool = False

    def deposit(self, cents: int) -> None:
        if cents <= 0:
            raise ValueError("a deposit must be positive")
        if self.frozen:
            raise PermissionError(f"the account of {self.owner} is frozen")
        self.balance += cents

    def withdraw(self, cents: int) -> None:
        if cents <= 0:
            raise ValueError("a withdrawal must be positive")
        if cents > self.balance:
            raise ValueError(f"{self.owner} has only {self.balance} cents")
        self.balance -= cents


def load_accounts(path: Path) -> dict[str, Account]:
    """Accounts by owner, from a JSON list of objects with owner, balance and frozen."""
    accounts = {}
    for item in json.loads(path.read_text(encoding="utf-8")):
        account = Account(item["owner"], int(item.get("balance", 0)), bool(item.get("frozen", False)))
        accounts[account.owner] = account
    return accounts


def save_accounts(path: Path, accounts: dict[str, Account]) -> None:
    """Write the accounts back as a JSON list, sorted by owner."""
    items = [
        {"owner": a.owner, "balance": a.balance, "frozen": a.frozen}
        for a in sorted(accounts.values(), key=lambda a: a.owner)
    ]
    path.write_text(json.dumps(items, indent=2), encoding="utf-8")


def transfer(accounts: dict[str, Account], source: str, target: str, cents: int) -> None:
    """Move money between two accounts; nothing changes if either step fails."""
    accounts[source].withdraw(cents)
    try:
        accounts[target].deposit(cents)
    except Exception:
        accounts[source].deposit(cents)
        raise
'''

DOCUMENT = (
    "The harbour of Kestrel Bay was dredged in 1887, when the town council borrowed four thousand pounds against "
    "the fish market's rents. The work took three summers, and the first steamer to berth at the new quay was the "
    "Margaret Ellis, carrying coal and twelve passengers from Leith.\n\n"
    "By 1902 the bay held sixty boats. The herring came in autumn, and the curing yards along the north shore "
    "employed two hundred women, who gutted and packed the fish in salt for export to the Baltic ports. Their "
    "wages were paid by the barrel, at fourpence for every barrel packed and passed by the fishery officer.\n\n"
    "The lighthouse on Carrick Point was lit in 1911. Its keeper, Thomas Rennie, kept a log of every ship that "
    "passed, and his entries for the great storm of January 1913 record nine vessels driven ashore between the "
    "point and the harbour mouth, with the loss of fourteen lives.\n\n"
    "After the war the herring declined. The curing yards closed one by one, the last in 1938, and the quay was "
    "given over to pleasure steamers that brought summer visitors from the cities, until the railway to the bay "
    "was closed in 1964 and the steamers stopped calling.\n"
)

WORKLOADS: dict[str, dict[str, str]] = {
    # (chat: an instruct model's user message; base: a base model's prompt)
    "edit": {
        "chat": f"Here is a Python file:\n\n{CODE}\nRepeat the whole file exactly, with one change: rename "
        "transfer to move_money.",
        "base": f"# accounts.py, version 1\n\n{CODE}\n\n# accounts.py, version 2 (transfer renamed to move_money)"
        "\n\nimport json\n",
    },
    "quote": {
        "chat": f"{DOCUMENT}\nQuote, word for word, the paragraph about the lighthouse and then the paragraph about "
        "the herring.",
        "base": f"{DOCUMENT}\nThe paragraph about the lighthouse, quoted in full:\n\nThe lighthouse",
    },
    # not measured: what --cold warms fresh servers up with, text that no workload repeats
    "warm-up": {
        "chat": "List five rivers of Europe and one city on each.",
        "base": "The five longest rivers of Europe are",
    },
    "chat": {
        "chat": "Write a short story about a fox who learns to play the violin in a city of clockwork birds.",
        "base": "Once upon a time, in a city of clockwork birds, a fox decided to learn the violin. On the first",
    },
}


def body_for(workload: str, chat: bool, round_no: int, tokens: int) -> tuple[str, dict[str, Any]]:
    tag = f"Request {round_no}."
    prompt = WORKLOADS[workload]["chat" if chat else "base"]
    common = {"max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True}}
    if chat:
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": f"{tag}\n{prompt}"}], **common}
    return "/v1/completions", {"prompt": f"{tag}\n{prompt}", **common}


def engine_names(args: argparse.Namespace) -> list[str]:
    if args.draft:
        return ["localinfer-off", "localinfer-draft", "llama-server", "llama-server-draft"]
    return ["localinfer-off", "localinfer-ngram", "llama-server", *(f"llama-server-{t}" for t in args.llama_spec)]


def stop_all(servers: dict[str, ManagedServer]) -> None:
    for server in servers.values():
        server.stop()
    servers.clear()


def start_servers(args: argparse.Namespace, bin_dir: Path) -> dict[str, ManagedServer]:
    logs = RESULTS_DIR / "logs"
    venv = REPO_ROOT / ".venv" / "bin" / "localinfer"
    servers: dict[str, ManagedServer] = {}
    common_li = ["--threads", str(args.threads), "--parallel", "1", "--ctx-size", str(args.ctx)]
    ours = ("localinfer-draft", ["--draft", str(args.draft)]) if args.draft else ("localinfer-ngram", [])
    for name, extra in (("localinfer-off", ["--spec", "off"]), ours):
        port = free_port()
        cmd = [str(venv), "serve", str(args.model), "--port", str(port), *common_li, *extra]
        servers[name] = ManagedServer(name, cmd, port, logs / f"speculation-{name}.log")
    llama = [str(bin_dir / "llama-server"), "-m", str(args.model), "-t", str(args.threads), "-np", "1"]
    llama += ["-c", str(args.ctx), "--host", "127.0.0.1"]
    theirs = [(f"llama-server-{t}", ["--spec-type", t]) for t in args.llama_spec]
    if args.draft:
        theirs = [
            ("llama-server-draft", ["--spec-type", "draft-simple", "-md", str(args.draft), "-td", str(args.threads)])
        ]
    for name, extra in [("llama-server", []), *theirs]:
        port = free_port()
        servers[name] = ManagedServer(
            name, [*llama, "--port", str(port), *extra], port, logs / f"speculation-{name}.log"
        )
    try:
        for server in servers.values():
            server.start()
    except BaseException:
        stop_all(servers)  # those already up (stop is a no-op for one that never started)
        raise
    assert list(servers) == engine_names(args)
    return servers


def main() -> int:
    install_sigterm_handler()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--chat", action="store_true", help="an instruct model: chat completions (else completions)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--workloads", default="edit,quote,chat")
    p.add_argument("--llama-spec", default="ngram-simple,ngram-mod", type=lambda v: [t for t in v.split(",") if t])
    p.add_argument("--draft", type=Path, help="compare a draft model (localinfer --draft, llama-server -md)")
    p.add_argument(
        "--cold",
        action="store_true",
        help="fresh servers each round, warmed on other text (else one set, warmed on the workloads themselves)",
    )
    p.add_argument("--llama-cpp-bin", type=Path)
    p.add_argument("--plot", type=Path)
    p.add_argument("--name", help="the model's name in the plot's title (default: the file's)")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    workloads = args.workloads.split(",")
    bin_dir = llama_cpp_bin(args.llama_cpp_bin)
    names = engine_names(args)
    tps: dict[str, dict[str, list[float]]] = {w: {n: [] for n in names} for w in workloads}
    drafts: dict[str, dict[str, list[tuple[int, int]]]] = {w: {n: [] for n in names} for w in workloads}
    servers = {} if args.cold else start_servers(args, bin_dir)
    try:
        with httpx.Client(timeout=600.0) as client:
            for round_no in range(args.rounds + 1):  # round 0 warms every engine up and is not counted
                if args.cold:  # fresh servers, warmed on other text: nothing from an earlier round is remembered
                    if round_no == 0:
                        continue
                    servers = start_servers(args, bin_dir)
                    for name in names:
                        stream_openai(client, servers[name].base_url, *body_for("warm-up", args.chat, 0, 32))
                order = names[round_no % len(names) :] + names[: round_no % len(names)]
                for workload in workloads:
                    path, body = body_for(workload, args.chat, round_no, args.tokens)
                    for name in order:
                        stats = stream_openai(client, servers[name].base_url, path, body)
                        if round_no == 0:
                            continue
                        tps[workload][name].append(stats.decode_tps)
                        t = stats.server_timings or {}
                        drafts[workload][name].append((int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0))))
                if args.cold:
                    stop_all(servers)
                print(f"round {round_no} done", file=sys.stderr)
    finally:
        stop_all(servers)
    report = summarise(tps, drafts, names)
    payload = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, **report}
    out = args.out or RESULTS_DIR / f"speculation-{'cold-' if args.cold else ''}{args.model.stem}.json"
    write_json(out, payload)
    print(render(report, names))
    if args.plot:
        plot(report, names, args.plot, args.name or args.model.stem)
    return 0


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(
    tps: dict[str, dict[str, list[float]]], drafts: dict[str, dict[str, list[tuple[int, int]]]], names: list[str]
) -> dict[str, Any]:
    llama_spec = [n for n in names if n.startswith("llama-server-")]
    mode = "draft" if "localinfer-draft" in names else "ngram"
    result: dict[str, Any] = {"tok_s": {}, "ratios": {}, "acceptance": {}}
    for workload, by_engine in tps.items():
        result["tok_s"][workload] = {n: spread(v) for n, v in by_engine.items()}
        ours = by_engine[f"localinfer-{mode}"]
        rounds = range(len(ours))
        vs_off = [ours[i] / by_engine["localinfer-off"][i] for i in rounds]
        vs_best = [ours[i] / max(by_engine[n][i] for n in [*llama_spec, "llama-server"]) for i in rounds]
        vs_plain = [ours[i] / by_engine["llama-server"][i] for i in rounds]
        result["ratios"][workload] = {
            f"{mode}/off": spread(vs_off),
            f"{mode}/best llama-server": spread(vs_best),
            f"{mode}/llama-server without speculation": spread(vs_plain),
        }
        result["acceptance"][workload] = {
            n: {"draft_n": sum(d for d, _ in v), "draft_n_accepted": sum(a for _, a in v)}
            for n, v in drafts[workload].items()
        }
    return result


def render(report: dict[str, Any], names: list[str]) -> str:
    lines = ["| workload | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for workload, by_engine in report["tok_s"].items():
        cells = [f"{s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f})" for s in (by_engine[n] for n in names)]
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    lines += ["", "| workload | ratio | median | min-max |", "|---|---|---|---|"]
    for workload, ratios in report["ratios"].items():
        for label, s in ratios.items():
            lines.append(f"| {workload} | {label} | {s['median']:.2f} | {s['min']:.2f}-{s['max']:.2f} |")
    lines += ["", "| workload | engine | draft tokens | accepted |", "|---|---|---|---|"]
    for workload, by_engine in report["acceptance"].items():
        for name, counts in by_engine.items():
            if counts["draft_n"]:
                lines.append(f"| {workload} | {name} | {counts['draft_n']} | {counts['draft_n_accepted']} |")
    return "\n".join(lines)


def plot(report: dict[str, Any], names: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(report["tok_s"])
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, name in enumerate(names):
        stats = [report["tok_s"][w][name] for w in workloads]
        xs = [j + i * width for j in range(len(workloads))]
        medians = [s["median"] for s in stats]
        errors = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]
        ax.bar(xs, medians, width, yerr=errors, capsize=3, label=name)
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(workloads))], workloads)
    ax.set_ylabel("decode tok/s (median, min-max)")
    how = "a draft model" if "localinfer-draft" in names else "prompt lookup"
    ax.set_title(f"Speculative decoding by {how}: {title}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
