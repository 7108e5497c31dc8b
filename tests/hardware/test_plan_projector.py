"""The plan counts a model's multimodal projector: its weights and the compute buffer it reserves to encode an image,
on the GPU where there is one (llama-server's --mmproj-offload, the default), else (or with --no-mmproj-offload) in
RAM; the layers offloaded get what the projector leaves."""

from __future__ import annotations

from pathlib import Path

from localinfer.engine.profiles import with_its_projector
from localinfer.hardware.model_profile import with_projector
from localinfer.hardware.plan import Overrides, plan
from tests.hardware.profiles import GB, HARDWARE, MODELS
from tests.projector_gguf import write_projector

MiB = 1 << 20
LLAMA_8B = MODELS["Llama 3.1 8B Q4_K_M"]
LLAMA_70B = MODELS["Llama 3.3 70B Q4_K_M"]
# about Gemma 3's SigLIP projector in f16: 0.8 GB of weights, 1.3 GB to encode an 896-px image
SEEING_8B = with_projector(LLAMA_8B, int(0.8 * GB), int(1.3 * GB))
SEEING_70B = with_projector(LLAMA_70B, int(0.8 * GB), int(1.3 * GB))


def test_without_a_gpu_the_projector_is_counted_in_ram_and_said() -> None:
    laptop = HARDWARE["laptop without GPU"]
    alone, seeing = plan(laptop, LLAMA_8B), plan(laptop, SEEING_8B)
    assert (seeing.ctx_size, seeing.parallel) == (alone.ctx_size, alone.parallel)
    assert seeing.memory_bytes - alone.memory_bytes == SEEING_8B.projector_total
    (said,) = [r for r in seeing.reasons if "projector" in r]
    assert said.endswith("in RAM") and f"{SEEING_8B.projector_total / MiB:.0f} MiB" in said


def test_on_a_gpu_the_projector_goes_first_and_the_layers_get_what_it_leaves() -> None:
    gpu = HARDWARE["RTX 3060 12 GB"]
    alone, seeing = plan(gpu, LLAMA_70B), plan(gpu, SEEING_70B)
    assert seeing.gpu_layers < alone.gpu_layers
    assert any("projector" in r and r.endswith("on cuda:0") for r in seeing.reasons)
    kept = plan(gpu, SEEING_70B, Overrides(projector_offload=False))
    assert kept.gpu_layers == alone.gpu_layers
    assert any(r.endswith("in RAM (--no-mmproj-offload)") for r in kept.reasons)


def test_a_projector_that_leaves_too_little_memory_makes_the_plan_say_it_does_not_fit() -> None:
    small = HARDWARE["8 GB RAM machine"]
    huge = with_projector(MODELS["SmolLM2 135M Q4_1"], 5 * GB, 0)
    assert plan(small, MODELS["SmolLM2 135M Q4_1"]).fits
    assert not plan(small, huge).fits


def test_the_profile_takes_the_projectors_weights_and_compute_from_its_header(tmp_path: Path) -> None:
    projector = write_projector(tmp_path / "p.gguf", image_size=64, patch_size=8, heads=2)
    profile = with_its_projector(LLAMA_8B, projector)
    assert profile.projector_bytes == projector.stat().st_size
    tokens, width, ff, heads = 64, 32, 64, 2  # 64-px images in 8-px patches; the file's widths
    assert profile.projector_compute_bytes == (tokens * tokens * heads + tokens * (4 * width + 2 * ff)) * 4
    assert with_its_projector(LLAMA_8B, None) == LLAMA_8B
    assert with_its_projector(LLAMA_8B, tmp_path / "gone.gguf") == LLAMA_8B  # its load says why
