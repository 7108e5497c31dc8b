"""What a user on an edge board or a small laptop gets: the quantization ``pull`` picks from a repository of the
usual sizes (with the sentence it gives), and the plan the server then loads it with: device, layers on the GPU,
context, slots, and why.

The repositories are Llama 3.2 3B and Llama 3.1 8B Instruct as the Hub's GGUF repositories publish them (file sizes
of bartowski's), the machines as their probes report them: a Raspberry Pi 5 (8 GB, four Cortex-A76 cores, no GPU
llama.cpp can use), a Jetson Orin Nano (8 GB shared between the CPU and an Ampere GPU), a MacBook Air M2 (16 GB
unified, Metal) and a laptop with an 8 GB GeForce RTX 4060 and 16 GB of RAM.
"""

from __future__ import annotations

import pytest

from localinfer.hardware.model_profile import ModelProfile
from localinfer.hardware.plan import fits_in, plan
from localinfer.hardware.profile import CPUInfo, GiB, HardwareProfile, MemoryInfo
from localinfer.models.files import choose_files, group_model_files
from tests.hardware.profiles import GB, HARDWARE, LLAMA_CPU, NO_ONNX, NO_VLLM, linux, nvidia

BOARDS: dict[str, HardwareProfile] = {
    "Raspberry Pi 5 8 GB": HardwareProfile(
        os="linux",
        os_version="6.6",
        cpu=CPUInfo("Cortex-A76", "aarch64", 4, 4, ("neon", "asimd", "dotprod")),
        memory=MemoryInfo(int(7.9 * GiB), int(7.1 * GiB)),
        gpus=(),  # its VideoCore GPU has no llama.cpp backend that helps
        backends=(LLAMA_CPU, NO_ONNX, NO_VLLM),
        onnx_providers=("CPUExecutionProvider",),
    ),
    "Jetson Orin Nano 8 GB": HARDWARE["Jetson Orin Nano 8 GB"],
    "MacBook Air M2 16 GB": HARDWARE["Apple M2 16 GB"],
    "laptop with an 8 GB GeForce": linux(8, 16, 10, nvidia("NVIDIA GeForce RTX 4060 Laptop GPU", 8, 7.3, (8, 9))),
}

# name -> (layers, f16 KV bytes per token per layer, trained context, {quantization: GB})
REPOSITORIES: dict[str, tuple[int, int, int, dict[str, float]]] = {
    "Llama 3.2 3B": (
        28,
        8 * 256 * 2,
        131072,
        {"F16": 6.43, "Q8_0": 3.42, "Q6_K": 2.64, "Q5_K_M": 2.32, "Q4_K_M": 2.02, "Q3_K_M": 1.69, "Q2_K": 1.36},
    ),
    "Llama 3.1 8B": (
        32,
        8 * 256 * 2,
        131072,
        {"F16": 16.07, "Q8_0": 8.54, "Q6_K": 6.60, "Q5_K_M": 5.73, "Q4_K_M": 4.92, "Q3_K_M": 4.02, "Q2_K": 3.18},
    ),
}

# (board, repository, quantization picked, device, GPU layers, context, slots, words of the plan's reasons)
EXPECTED = [
    ("Raspberry Pi 5 8 GB", "Llama 3.2 3B", "Q8_0", "cpu", 0, 8192, 1, "no GPU was found: every layer runs on the CPU"),
    ("Raspberry Pi 5 8 GB", "Llama 3.1 8B", "Q4_K_M", "cpu", 0, 8192, 1, "4 CPU threads, one per physical core"),
    ("Jetson Orin Nano 8 GB", "Llama 3.2 3B", "Q8_0", "cuda:0", 29, 8192, 1, "all 29 layers on Orin"),
    # The 8 GB it shares with the CPU leave 4.5 GiB for layers: only the 2-bit file fits with its cache.
    ("Jetson Orin Nano 8 GB", "Llama 3.1 8B", "Q2_K", "cuda:0", 33, 8192, 1, "all 33 layers on Orin"),
    ("MacBook Air M2 16 GB", "Llama 3.2 3B", "Q8_0", "metal", 29, 8192, 1, "all 29 layers on Apple M2"),
    ("MacBook Air M2 16 GB", "Llama 3.1 8B", "Q6_K", "metal", 33, 8192, 1, "all 33 layers on Apple M2"),
    ("laptop with an 8 GB GeForce", "Llama 3.2 3B", "Q8_0", "cuda:0", 29, 8192, 3, "all 29 layers on NVIDIA"),
    ("laptop with an 8 GB GeForce", "Llama 3.1 8B", "Q4_K_M", "cuda:0", 31, 8192, 2, "31 of 33 layers on NVIDIA"),
]


def _files(repository: str) -> dict[str, int]:
    _, _, _, quants = REPOSITORIES[repository]
    stem = repository.replace(" ", "-")
    return {f"{stem}-Instruct-{quant}.gguf": int(size * GB) for quant, size in quants.items()}


@pytest.mark.parametrize(
    ("board", "repository", "quant", "device", "gpu_layers", "ctx", "slots", "why"),
    EXPECTED,
    ids=[f"{row[0]} / {row[1]}" for row in EXPECTED],
)
def test_an_edge_board_gets_the_file_and_the_plan_that_fit_it(
    board: str, repository: str, quant: str, device: str, gpu_layers: int, ctx: int, slots: int, why: str
) -> None:
    hw = BOARDS[board]
    sizes = _files(repository)
    choice = choose_files(
        group_model_files(sizes),
        None,
        sizes=sizes,
        fits=lambda size: fits_in(hw, size),
    )
    assert choice is not None
    assert choice.group.quant == quant
    assert "fits this machine's memory" in choice.reason

    layers, kv_per_layer, trained, _ = REPOSITORIES[repository]
    model = ModelProfile(repository, "gguf", sizes[choice.group.main], layers, trained, layers * kv_per_layer, quant)
    chosen = plan(hw, model)
    assert (chosen.device, chosen.gpu_layers, chosen.ctx_size, chosen.parallel, chosen.fits) == (
        device,
        gpu_layers,
        ctx,
        slots,
        True,
    )
    reasons = " | ".join(chosen.reasons)
    assert why in reasons, reasons
    assert chosen.threads == hw.cpu.physical_cores


def test_every_board_is_planned_for_both_repositories() -> None:
    assert {(row[0], row[1]) for row in EXPECTED} == {(b, r) for b in BOARDS for r in REPOSITORIES}
