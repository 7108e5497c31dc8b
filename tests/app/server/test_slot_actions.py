"""llama-server's ``POST /slots/{id}?action=save|restore|erase`` with ``serve --slot-save-path DIR``: a slot's cache
saved to a file, erased, restored (in the same server and in a restarted one), so a long prompt is computed once;
bad requests refused as llama-server refuses them. Against a real ``localinfer serve`` on SmolLM2, and the answers'
fields and statuses against the real llama-server's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localinfer.models.store import Manifest
from tests.app.server.conftest import Server, serving
from tests.llama_cpp_tools import llama_server

pytestmark = pytest.mark.model

# A prompt long enough that its reuse shows (about 400 tokens); greedy, so the text can be compared.
PROMPT = "The quick brown fox jumps over the lazy dog. " * 40
SLOT_FLAGS = ("--parallel", "1", "--ctx-size", "2048")


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def server(
    smollm2: Manifest, test_home: Path, slot_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with serving(
        smollm2.name, test_home, tmp_path_factory.mktemp("slot-serve"), *SLOT_FLAGS, "--slot-save-path", str(slot_dir)
    ) as server:
        yield server


def complete(url: str, prompt: str | list[int] = PROMPT, n_predict: int = 8, **extra: Any) -> dict[str, Any]:
    answer = httpx.post(
        f"{url}/completion", json={"prompt": prompt, "n_predict": n_predict, "temperature": 0, **extra}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def act(url: str, slot: int | str, action: str, filename: str | None = None) -> httpx.Response:
    body = {"filename": filename} if filename is not None else None
    return httpx.post(f"{url}/slots/{slot}", params={"action": action}, json=body, timeout=120)


def test_save_answers_the_slots_tokens_and_the_files_bytes(server: Server, slot_dir: Path) -> None:
    first = complete(server.url)
    saved = act(server.url, 0, "save", "fields.bin")
    assert saved.status_code == 200, saved.text
    body = saved.json()
    assert set(body) == {"id_slot", "filename", "n_saved", "n_written", "timings"}
    assert body["id_slot"] == 0 and body["filename"] == "fields.bin"
    # the prompt and every generated token but the last (sampled, never decoded), as llama-server counts them
    assert body["n_saved"] == first["tokens_evaluated"] + first["tokens_predicted"] - 1
    assert body["n_written"] == (slot_dir / "fields.bin").stat().st_size
    assert set(body["timings"]) == {"save_ms"} and body["timings"]["save_ms"] >= 0


def test_a_save_leaves_only_the_named_file_in_the_folder(server: Server, slot_dir: Path) -> None:
    complete(server.url)
    for _ in range(2):  # the second save replaces the first whole
        assert act(server.url, 0, "save", "only.bin").status_code == 200
    assert not [p.name for p in slot_dir.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    assert (slot_dir / "only.bin").is_file()


def test_a_file_name_of_the_longest_length_a_name_may_have_is_saved(server: Server, slot_dir: Path) -> None:
    complete(server.url)
    name = "s" * 251 + ".bin"  # 255 bytes: the temporary file's name must not grow past what the folder takes
    saved = act(server.url, 0, "save", name)
    assert saved.status_code == 200, saved.text
    assert (slot_dir / name).is_file()


def test_an_erased_slot_computes_the_whole_prompt_again(server: Server) -> None:
    complete(server.url)
    assert complete(server.url)["timings"]["cache_n"] > 0
    held = act(server.url, 0, "save", "erase.bin").json()["n_saved"]
    erased = act(server.url, 0, "erase")
    assert erased.status_code == 200
    assert erased.json() == {"id_slot": 0, "n_erased": held}
    again = complete(server.url)
    assert again["timings"]["cache_n"] == 0
    assert again["timings"]["prompt_n"] == again["tokens_evaluated"]


def test_a_restored_slot_reuses_the_saved_prompt_and_answers_the_same(server: Server) -> None:
    fresh = complete(server.url)
    saved = act(server.url, 0, "save", "restore.bin").json()
    act(server.url, 0, "erase")
    restored = act(server.url, 0, "restore", "restore.bin")
    assert restored.status_code == 200, restored.text
    body = restored.json()
    assert set(body) == {"id_slot", "filename", "n_restored", "n_read", "timings"}
    assert body["id_slot"] == 0 and body["filename"] == "restore.bin" and body["n_restored"] == saved["n_saved"]
    assert body["n_read"] == saved["n_written"] and set(body["timings"]) == {"restore_ms"}
    reused = complete(server.url)
    assert reused["timings"]["cache_n"] == reused["tokens_evaluated"] - 1  # all but the last prompt token
    assert reused["content"] == fresh["content"]


def test_the_restored_prefix_counts_as_cached_tokens_on_openais_route(server: Server) -> None:
    complete(server.url)
    act(server.url, 0, "save", "openai.bin")
    act(server.url, 0, "erase")
    act(server.url, 0, "restore", "openai.bin")
    answer = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": "any", "prompt": PROMPT + " And then", "max_tokens": 4, "temperature": 0},
        timeout=120,
    ).json()
    usage = answer["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 400
    assert usage["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]


def test_a_restore_into_a_restarted_server_reuses_the_prompt(
    server: Server, smollm2: Manifest, test_home: Path, slot_dir: Path, tmp_path: Path
) -> None:
    fresh = complete(server.url)
    saved = act(server.url, 0, "save", "restart.bin").json()
    with serving(smollm2.name, test_home, tmp_path, *SLOT_FLAGS, "--slot-save-path", str(slot_dir)) as restarted:
        restored = act(restarted.url, 0, "restore", "restart.bin")
        assert restored.status_code == 200, restored.text
        assert restored.json()["n_restored"] == saved["n_saved"]
        reused = complete(restarted.url)
    assert reused["timings"]["cache_n"] == reused["tokens_evaluated"] - 1
    assert reused["content"] == fresh["content"]


def test_a_sliding_window_models_restored_slot_serves_a_prompt_that_goes_on_from_it(
    gemma3: Manifest, test_home: Path, tmp_path: Path
) -> None:
    """Gemma 3 keeps only a window of its cache; the file holds the window as of its last token, which a prompt that
    goes on from there needs. A prompt that leaves it inside the window is computed whole, never from a wrong cache."""
    folder = tmp_path / "slots"
    folder.mkdir()
    with serving(gemma3.name, test_home, tmp_path, *SLOT_FLAGS, "--slot-save-path", str(folder)) as gemma:
        tokens = httpx.post(f"{gemma.url}/tokenize", json={"content": PROMPT * 2, "add_special": True}).json()["tokens"]
        longer, diverging = tokens + tokens[5:20], tokens[:700] + tokens[5:20]
        fresh = [complete(gemma.url, prompt, cache_prompt=False)["content"] for prompt in (longer, diverging)]
        complete(gemma.url, tokens, n_predict=0)
        assert act(gemma.url, 0, "save", "gemma.bin").json()["n_saved"] == len(tokens)
        act(gemma.url, 0, "erase")
        act(gemma.url, 0, "restore", "gemma.bin")
        goes_on = complete(gemma.url, longer)
        act(gemma.url, 0, "restore", "gemma.bin")
        leaves = complete(gemma.url, diverging)
    assert goes_on["timings"]["cache_n"] == len(tokens) and goes_on["content"] == fresh[0]
    assert leaves["timings"]["cache_n"] == 0 and leaves["content"] == fresh[1]


def test_a_busy_slot_is_saved_once_its_request_ends(server: Server) -> None:
    """As llama-server defers it: the save waits for the slot, and holds what the whole request computed."""
    n_prompt = complete(server.url, n_predict=1)["tokens_evaluated"]
    saved: list[httpx.Response] = []
    with httpx.stream(
        "POST",
        f"{server.url}/completion",
        json={"prompt": PROMPT, "n_predict": 200, "temperature": 0, "ignore_eos": True, "stream": True},
        timeout=120,
    ) as stream:
        lines = stream.iter_lines()
        next(line for line in lines if line.startswith("data: "))  # generating now
        saver = threading.Thread(target=lambda: saved.append(act(server.url, 0, "save", "busy.bin")))
        saver.start()
        last = [line for line in lines if line.startswith("data: ")][-1]
    saver.join()
    assert '"stop":true' in last.replace(" ", "")
    assert saved[0].status_code == 200, saved[0].text
    assert saved[0].json()["n_saved"] == n_prompt + 199  # all of it: the prompt and every token decoded


@pytest.mark.parametrize(
    "filename",
    [
        "../escape.bin",
        "sub/name.bin",
        "/tmp/abs.bin",
        "a\\b.bin",
        "",
        ".",
        "..",
        "bad:name",
        "tail.",
        " lead",
        "a\x01b",
    ],
)
def test_a_name_that_is_not_a_plain_file_name_is_refused(server: Server, slot_dir: Path, filename: str) -> None:
    for action in ("save", "restore"):
        answer = act(server.url, 0, action, filename)
        assert answer.status_code == 400
        assert answer.json()["error"]["type"] == "invalid_request_error"
        assert answer.json()["error"]["message"].startswith("Invalid filename")
    assert not (slot_dir.parent / "escape.bin").exists()


def test_a_missing_file_is_a_400_and_leaves_the_slot_empty(server: Server) -> None:
    complete(server.url)
    answer = act(server.url, 0, "restore", "never-saved.bin")
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("Unable to restore slot")
    assert complete(server.url)["timings"]["cache_n"] == 0  # as llama-server, which clears the slot


def test_a_file_that_is_no_slot_state_is_refused(server: Server, slot_dir: Path) -> None:
    (slot_dir / "garbage.bin").write_bytes(b"not a llama.cpp state file" * 10)
    answer = act(server.url, 0, "restore", "garbage.bin")
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("Unable to restore slot")
    assert complete(server.url)["timings"]["cache_n"] == 0


@pytest.mark.parametrize(("slot", "action"), [("x", "erase"), ("1x", "erase"), ("-1", "erase"), ("0", "bogus")])
def test_an_unknown_slot_or_action_is_a_400(server: Server, slot: str, action: str) -> None:
    answer = httpx.post(f"{server.url}/slots/{slot}", params={"action": action}, json={"filename": "a.bin"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == 400 and error["type"] == "invalid_request_error"
    assert error["message"].startswith("Invalid action" if action == "bogus" else "Invalid slot ID")


def test_a_slot_id_past_the_last_slot_wraps_around(server: Server) -> None:
    """As llama-server's: with one slot, slot 7 is slot 0 (and the answer names the slot asked for)."""
    complete(server.url)
    held = act(server.url, 0, "save", "wrap.bin").json()["n_saved"]
    erased = act(server.url, 7, "erase")
    assert erased.status_code == 200
    assert erased.json() == {"id_slot": 7, "n_erased": held}


def test_a_body_without_a_filename_is_a_400(server: Server) -> None:
    for body in ({}, {"filename": 3}):
        answer = httpx.post(f"{server.url}/slots/0", params={"action": "save"}, json=body)
        assert answer.status_code == 400
        assert answer.json()["error"]["type"] == "invalid_request_error"


def test_without_slot_save_path_every_action_is_a_501(smollm2_server: Server) -> None:
    for action in ("save", "restore", "erase"):
        answer = act(smollm2_server.url, 0, action, "a.bin")
        assert answer.status_code == 501
        error = answer.json()["error"]
        assert error["code"] == 501 and error["type"] == "not_supported_error"
        assert "--slot-save-path" in error["message"]


def test_an_onnx_model_refuses_slot_actions_naming_its_backend(
    smollm2_onnx: Manifest, test_home: Path, slot_dir: Path, tmp_path: Path
) -> None:
    with serving(smollm2_onnx.name, test_home, tmp_path, "--slot-save-path", str(slot_dir)) as onnx:
        answer = act(onnx.url, 0, "save", "onnx.bin")
    assert answer.status_code == 501
    assert answer.json()["error"]["type"] == "not_supported_error"
    assert "onnx backend" in answer.json()["error"]["message"]
    assert not (slot_dir / "onnx.bin").exists()


# --- against llama-server ---------------------------------------------------------------------------------------


def _scenario(url: str) -> list[tuple[Any, ...]]:
    """What a client sees over one session of slot actions: each answer's status and fields (an error's type)."""
    seen: list[tuple[Any, ...]] = []

    def note(answer: httpx.Response) -> dict[str, Any]:
        body: dict[str, Any] = answer.json()
        shape = [*sorted(body["error"]), body["error"]["type"]] if "error" in body else sorted(body)
        seen.append((answer.status_code, *shape))
        return body

    complete(url)
    saved = note(act(url, 0, "save", "parity.bin"))
    erased = note(act(url, 0, "erase"))
    restored = note(act(url, 0, "restore", "parity.bin"))
    seen.append(("counts", saved["n_saved"], erased["n_erased"], restored["n_restored"]))
    seen.append(("reused", complete(url)["timings"]["cache_n"]))
    note(act(url, 0, "save", "../out.bin"))
    note(act(url, 0, "restore", "missing.bin"))
    note(act(url, 0, "bogus"))
    note(act(url, "x", "erase"))
    note(act(url, 9, "erase"))
    return seen


@pytest.fixture(scope="module")
def theirs(smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple[Any, ...]], Path]:
    """The scenario as llama-server answers it, and the folder it saved its slot in."""
    folder = tmp_path_factory.mktemp("llama-slots")
    log_dir = tmp_path_factory.mktemp("llama-log")
    with llama_server(smollm2.path, log_dir, *SLOT_FLAGS, "--slot-save-path", str(folder)) as url:
        return _scenario(url), folder


def test_answers_and_errors_match_llama_servers(server: Server, theirs: tuple[list[tuple[Any, ...]], Path]) -> None:
    act(server.url, 0, "erase")
    assert _scenario(server.url) == theirs[0]


def test_a_slot_llama_server_saved_restores_here(
    server: Server, slot_dir: Path, theirs: tuple[list[tuple[Any, ...]], Path]
) -> None:
    fresh = complete(server.url)
    (slot_dir / "from-llama-server.bin").write_bytes((theirs[1] / "parity.bin").read_bytes())
    act(server.url, 0, "erase")
    restored = act(server.url, 0, "restore", "from-llama-server.bin")
    assert restored.status_code == 200, restored.text
    reused = complete(server.url)
    assert reused["timings"]["cache_n"] == reused["tokens_evaluated"] - 1
    assert reused["content"] == fresh["content"]


def test_without_slot_save_path_llama_server_answers_501_too(
    smollm2_server: Server, smollm2: Manifest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with llama_server(smollm2.path, tmp_path_factory.mktemp("llama-log"), *SLOT_FLAGS) as url:
        theirs = act(url, 0, "save", "a.bin")
    ours = act(smollm2_server.url, 0, "save", "a.bin")
    assert (ours.status_code, ours.json()["error"]["type"]) == (theirs.status_code, theirs.json()["error"]["type"])
