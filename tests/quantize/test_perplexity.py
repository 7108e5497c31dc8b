"""Our perplexity and KL divergence against llama.cpp's llama-perplexity, on the same model, text, context and
chunks.

llama-perplexity is the one bench/build-llama-cpp-style builds cache beside llama-server (from the llama.cpp
source llama-cpp-python vendors); the tests that compare with it skip, saying so, where it is not built. The text
is the default one localinfer ships. Perplexity is compared on the F16 model, where both builds compute the same
float arithmetic (they agree to 0.01 %); on quantized weights the two builds' quantized kernels differ (Q8_0: ours
12.10, llama-perplexity's 12.31 over two chunks of 256), so the KLD comparison uses the issue's looser 5 %.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from localinfer.app.cli import main
from localinfer.models.store import ModelStore
from localinfer.quantize.gguf_quantizer import Options, quantize_model
from localinfer.quantize.perplexity import default_text, measure
from localinfer.quantize.quant_types import parse_type
from tests.llama_cpp_tools import llama_tool

pytestmark = pytest.mark.model

CTX = 256
CHUNKS = 4
TEXT = Path(__file__).parents[2] / "src" / "localinfer" / "quantize" / "data" / "default.txt"


def llama_perplexity(*args: str) -> str:
    binary = llama_tool("llama-perplexity")
    command = [str(binary), "-f", str(TEXT), "-c", str(CTX), "--chunks", str(CHUNKS), "-b", str(CTX), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=True)
    return done.stdout + done.stderr


def figure(log: str, pattern: str) -> float:
    found = re.search(pattern, log)
    assert found, f"{pattern!r} not in llama-perplexity's output"
    return float(found.group(1))


@pytest.fixture(scope="module")
def q8(smollm2_f16: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = ModelStore(tmp_path_factory.mktemp("q8-home") / "models")
    return quantize_model(store, store, str(smollm2_f16), Options(type=parse_type("Q8_0"))).manifest.path


def test_perplexity_equals_llama_perplexitys(smollm2_f16: Path) -> None:
    theirs = figure(llama_perplexity("-m", str(smollm2_f16)), r"Final estimate: PPL = ([0-9.]+)")
    ours = measure(smollm2_f16, default_text(), ctx=CTX, chunks=CHUNKS)
    assert ours.chunks == CHUNKS and ours.scored == CHUNKS * (CTX // 2 - 1)
    assert ours.ppl == pytest.approx(theirs, rel=0.01)


def test_kl_divergence_equals_llama_perplexitys(smollm2_f16: Path, q8: Path, tmp_path: Path) -> None:
    base = tmp_path / "base.kld"
    llama_perplexity("-m", str(smollm2_f16), "--kl-divergence-base", str(base))
    log = llama_perplexity("-m", str(q8), "--kl-divergence-base", str(base), "--kl-divergence")
    ours = measure(q8, default_text(), base=smollm2_f16, ctx=CTX, chunks=CHUNKS).divergence
    assert ours is not None
    assert ours.kld_mean == pytest.approx(figure(log, r"Mean    KLD:\s+([0-9.]+)"), rel=0.05)
    assert ours.base_ppl == pytest.approx(figure(log, r"Mean PPL\(base\)\s+:\s+([0-9.]+)"), rel=0.01)


def test_a_model_against_itself_diverges_by_nothing(smollm2_f16: Path) -> None:
    report = measure(smollm2_f16, default_text(), base=smollm2_f16, ctx=128, chunks=2)
    assert report.divergence is not None
    assert report.divergence.kld_mean == 0 and report.divergence.kld_p99 == 0
    assert report.divergence.same_top == 1 and report.divergence.mean_delta_p == 0
    assert report.divergence.base_ppl == report.ppl


def test_perplexity_cli_prints_json(
    home: Path, smollm2_f16: Path, q8: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--home", str(home), "perplexity", str(q8), "--base", str(smollm2_f16), "--ctx", "128", "--chunks", "2"]
    assert main([*args, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["chunks"] == 2 and shown["ctx"] == 128 and shown["ppl"] > 1
    assert 0 < shown["divergence"]["kld_mean"] < 0.1 and 0.5 < shown["divergence"]["same_top"] <= 1


def test_a_text_too_short_is_one_line_with_a_hint(
    home: Path, smollm2_f16: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "short.txt"
    text.write_text("Only a few words.\n")
    assert main(["--home", str(home), "perplexity", str(smollm2_f16), "--text", str(text)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("localinfer: the text has ") and "needs at least 1024" in err[0]
    assert err[1] == "hint: pass a longer --text or a smaller --ctx"


def test_smaller_types_lose_more_q8_0_then_q4_k_m_then_q2_k(smollm2_f16: Path, tmp_path: Path) -> None:
    """Each quantization of the F16 source loads and writes text, and its KLD from the source grows, and its
    same-top-token share falls, from Q8_0 to Q4_K_M to Q2_K."""
    from llama_cpp import Llama

    store = ModelStore(tmp_path / "models")
    kld: list[float] = []
    same_top: list[float] = []
    for name in ("Q8_0", "Q4_K_M", "Q2_K"):
        path = quantize_model(store, store, str(smollm2_f16), Options(type=parse_type(name))).manifest.path
        llm = Llama(str(path), n_ctx=128, verbose=False)
        try:
            answer = llm.create_completion("The capital of France is", max_tokens=8, temperature=0)
        finally:
            llm.close()
        assert isinstance(answer, dict) and answer["choices"][0]["text"].strip(), name
        divergence = measure(path, default_text(), base=smollm2_f16, ctx=CTX, chunks=CHUNKS).divergence
        assert divergence is not None
        kld.append(divergence.kld_mean)
        same_top.append(divergence.same_top)
    assert kld == sorted(kld) and same_top == sorted(same_top, reverse=True)
