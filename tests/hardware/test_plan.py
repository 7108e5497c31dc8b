"""The planner over a table of machines and models: backend, device, GPU layers, context, slots, and why."""

from __future__ import annotations

import dataclasses

import pytest

from localinfer.hardware.model_profile import ModelProfile, with_draft
from localinfer.hardware.plan import CPU_COMPUTE_RESERVE, Overrides, PlanError, fits_in, plan
from localinfer.hardware.profile import BackendAvailability
from tests.hardware.profiles import GB, HARDWARE, MODELS

# (machine, model, backend, device, GPU layers, context, slots, fits, words the explanation must hold)
PLANS = [
    ("laptop without GPU", "SmolLM2 135M Q4_1", "llamacpp", "cpu", 0, 8192, 4, True, "no GPU was found"),
    ("laptop without GPU", "Llama 3.1 8B Q4_K_M", "llamacpp", "cpu", 0, 8192, 1, True, "8192 tokens of the 131072"),
    ("laptop without GPU", "Llama 3.3 70B Q4_K_M", "llamacpp", "cpu", 0, 8192, 1, False, "it will swap or fail"),
    ("8 GB RAM machine", "SmolLM2 135M Q4_1", "llamacpp", "cpu", 0, 8192, 4, True, "4 slots"),
    ("8 GB RAM machine", "Llama 3.1 8B Q4_K_M", "llamacpp", "cpu", 0, 8192, 1, False, "needs 5.8 GiB but only 4.0 GiB"),
    ("RTX 3060 12 GB", "SmolLM2 135M Q4_1", "llamacpp", "cuda:0", 31, 8192, 4, True, "all 31 layers on NVIDIA"),
    ("RTX 3060 12 GB", "Llama 3.1 8B Q4_K_M", "llamacpp", "cuda:0", 33, 8192, 4, True, "all 33 layers"),
    ("RTX 3060 12 GB", "Llama 3.3 70B Q4_K_M", "llamacpp", "cuda:0", 20, 8192, 1, False, "20 of 81 layers"),
    ("RTX 4090 24 GB", "Llama 3.1 8B Q4_K_M", "llamacpp", "cuda:0", 33, 8192, 4, True, "all 33 layers"),
    ("RTX 4090 24 GB", "Llama 3.3 70B Q4_K_M", "llamacpp", "cuda:0", 39, 8192, 2, True, "the rest run on the CPU"),
    ("two RTX 4060 Ti 16 GB", "Llama 3.1 8B Q4_K_M", "llamacpp", "cuda:0,1", 33, 8192, 4, True, "on 2 GPUs"),
    ("two RTX 4060 Ti 16 GB", "Llama 3.3 70B Q4_K_M", "llamacpp", "cuda:0,1", 49, 8192, 3, True, "49 of 81 layers"),
    ("Apple M2 16 GB", "Llama 3.1 8B Q4_K_M", "llamacpp", "metal", 33, 8192, 1, True, "all 33 layers on Apple M2"),
    ("Apple M2 16 GB", "Llama 3.3 70B Q4_K_M", "llamacpp", "metal", 15, 8192, 1, False, "it will swap or fail"),
    ("Apple M2 16 GB", "Qwen2.5 1.5B ONNX int4", "onnx", "apple", 0, 8192, 1, True, "through CoreML"),
    ("Apple M3 Max 64 GB", "Llama 3.3 70B Q4_K_M", "llamacpp", "metal", 78, 8192, 1, True, "78 of 81 layers"),
    ("Apple M3 Max 64 GB", "Qwen2.5 1.5B ONNX int4", "onnx", "apple", 0, 8192, 1, True, "CoreML"),
    (
        "Windows, AMD GPU with DirectML",
        "Llama 3.1 8B Q4_K_M",
        "llamacpp",
        "cpu",
        0,
        8192,
        3,
        True,
        "without GPU support",
    ),
    ("Windows, AMD GPU with DirectML", "Qwen2.5 1.5B ONNX int4", "onnx", "directml", 0, 8192, 1, True, "DirectML"),
    ("A100 40 GB", "Llama 3.3 70B Q4_K_M", "llamacpp", "cuda:0", 60, 8192, 4, True, "60 of 81 layers on NVIDIA A100"),
    ("A100 40 GB", "Qwen2.5 1.5B ONNX int4", "onnx", "cuda:0", 0, 8192, 1, True, "the NVIDIA GPU through CUDA"),
    ("A100 40 GB", "Llama 3.1 8B safetensors", "vllm", "cuda:0", -1, 8192, 0, True, "vLLM on NVIDIA A100"),
    ("H100 80 GB with vLLM", "Llama 3.3 70B Q4_K_M", "llamacpp", "cuda:0", 81, 8192, 4, True, "all 81 layers"),
    ("H100 80 GB with vLLM", "Llama 3.1 8B safetensors", "vllm", "cuda:0", -1, 8192, 0, True, "compute capability"),
    ("H100 80 GB with vLLM", "Llama 3.3 70B safetensors", "vllm", "cuda:0", -1, 8192, 0, False, "fail to load"),
    ("H100 80 GB without vLLM", "Qwen2.5 1.5B ONNX int4", "onnx", "cuda:0", 0, 8192, 1, True, "through CUDA"),
    ("4x A100 80 GB with vLLM", "Llama 3.1 8B safetensors", "vllm", "cuda:0", -1, 8192, 0, True, "vLLM on NVIDIA A100"),
    (
        "4x A100 80 GB with vLLM",
        "Llama 3.3 70B safetensors",
        "vllm",
        "cuda:0,1,2,3",
        -1,
        8192,
        0,
        True,
        "split over 4 GPUs (tensor parallelism 4)",
    ),
    ("Jetson Orin Nano 8 GB", "SmolLM2 135M Q4_1", "llamacpp", "cuda:0", 31, 8192, 4, True, "all 31 layers on Orin"),
    ("Jetson Orin Nano 8 GB", "Llama 3.1 8B Q4_K_M", "llamacpp", "cuda:0", 27, 8192, 1, False, "it will swap or fail"),
]

# (machine, model, words of the PlanError's message)
REFUSALS = [
    ("laptop without GPU", "Llama 3.1 8B safetensors", "needs an NVIDIA GPU of compute capability 8.0"),
    ("laptop without GPU", "Qwen2.5 1.5B ONNX int4", "onnxruntime-genai is not installed"),
    ("RTX 4090 24 GB", "Llama 3.1 8B safetensors", "with 40 GiB or more"),
    ("Apple M3 Max 64 GB", "Llama 3.1 8B safetensors", "runs on Linux only"),
    ("H100 80 GB without vLLM", "Llama 3.1 8B safetensors", "vllm is not installed"),
]


@pytest.mark.parametrize(
    ("machine", "model", "backend", "device", "gpu_layers", "ctx", "slots", "fits", "why"),
    PLANS,
    ids=[f"{row[0]} / {row[1]}" for row in PLANS],
)
def test_the_plan_for_each_machine_and_model(
    machine: str, model: str, backend: str, device: str, gpu_layers: int, ctx: int, slots: int, fits: bool, why: str
) -> None:
    chosen = plan(HARDWARE[machine], MODELS[model])
    assert (chosen.backend, chosen.device, chosen.gpu_layers, chosen.ctx_size, chosen.parallel, chosen.fits) == (
        backend,
        device,
        gpu_layers,
        ctx,
        slots,
        fits,
    )
    explanation = " | ".join(chosen.reasons)
    assert why in explanation, explanation
    assert chosen.threads == HARDWARE[machine].cpu.physical_cores


def test_vllm_splits_a_model_over_gpus_only_when_one_cannot_hold_it() -> None:
    four = HARDWARE["4x A100 80 GB with vLLM"]
    assert plan(four, MODELS["Llama 3.3 70B safetensors"]).tensor_parallel == 4
    assert plan(four, MODELS["Llama 3.1 8B safetensors"]).tensor_parallel == 0


def test_the_table_covers_twelve_machines() -> None:
    assert len(HARDWARE) >= 12
    assert {row[0] for row in PLANS} == set(HARDWARE)


@pytest.mark.parametrize(("machine", "model", "words"), REFUSALS, ids=[f"{r[0]} / {r[1]}" for r in REFUSALS])
def test_what_cannot_run_is_refused_with_a_reason_and_a_hint(machine: str, model: str, words: str) -> None:
    with pytest.raises(PlanError) as refused:
        plan(HARDWARE[machine], MODELS[model])
    assert words in refused.value.message
    assert refused.value.hint


def test_every_choice_can_be_overridden() -> None:
    rtx = HARDWARE["RTX 4090 24 GB"]
    chosen = plan(rtx, MODELS["Llama 3.1 8B Q4_K_M"], Overrides(gpu_layers=10, ctx_size=32768, parallel=2, threads=3))
    assert (chosen.gpu_layers, chosen.ctx_size, chosen.parallel, chosen.threads) == (10, 32768, 2, 3)
    assert "10 layers on the GPU, as asked" in chosen.reasons
    assert "context 32768 tokens, as asked" in chosen.reasons
    assert plan(rtx, MODELS["Llama 3.1 8B Q4_K_M"], Overrides(gpu_layers=0)).device == "cpu"
    assert plan(rtx, MODELS["Llama 3.1 8B Q4_K_M"], Overrides(gpu_layers=-1)).gpu_layers == 33


def test_gpu_layers_asked_for_without_a_usable_gpu_stay_on_the_cpu() -> None:
    for machine in ("laptop without GPU", "Windows, AMD GPU with DirectML"):  # no GPU; a GPU llama.cpp cannot reach
        chosen = plan(HARDWARE[machine], MODELS["SmolLM2 135M Q4_1"], Overrides(gpu_layers=-1))
        assert (chosen.gpu_layers, chosen.device) == (0, "cpu")
        assert "no GPU here can take them" in " ".join(chosen.reasons)


def test_a_backend_asked_for_that_cannot_serve_the_format_is_refused() -> None:
    h100 = HARDWARE["H100 80 GB with vLLM"]
    with pytest.raises(PlanError, match="not used for GGUF"):
        plan(h100, MODELS["SmolLM2 135M Q4_1"], Overrides(backend="vllm"))
    with pytest.raises(PlanError, match="ONNX Runtime runs ONNX models"):
        plan(h100, MODELS["SmolLM2 135M Q4_1"], Overrides(backend="onnx"))
    with pytest.raises(PlanError, match="no backend called"):
        plan(h100, MODELS["SmolLM2 135M Q4_1"], Overrides(backend="tensorrt"))


def test_a_kv_cache_that_does_not_fit_in_f16_is_kept_in_q8_0_before_the_context_shrinks() -> None:
    small = HARDWARE["8 GB RAM machine"]  # 5 GiB free: 4 GiB after the margin
    wide = ModelProfile("wide", "gguf", 3 * GB, 32, 131072, 32 * 8 * 256 * 2)  # 2.8 GiB, and 1 GiB per 8192 tokens
    chosen = plan(small, wide)
    assert chosen.fits
    assert (chosen.ctx_size, chosen.cache_type_k, chosen.cache_type_v) == (8192, "q8_0", "q8_0")
    assert any("KV cache in q8_0 (53% of f16's memory)" in reason for reason in chosen.reasons), chosen.reasons
    # the memory counted is q8_0's: 34 bytes per 32 values where f16 takes 64
    q8_0_per_token = 32 * 8 * 256 * 2 * 34 // 64
    assert chosen.memory_bytes == wide.size_bytes + q8_0_per_token * 8192 * chosen.parallel + CPU_COMPUTE_RESERVE


def test_with_plain_attention_only_the_keys_are_quantized_when_f16_does_not_fit() -> None:
    """--flash-attn off: llama.cpp reads a quantized value cache only in flash attention, so the planner keeps the
    values in f16 (the load would otherwise be refused for a type the user never asked for)."""
    small = HARDWARE["8 GB RAM machine"]
    wide = ModelProfile("wide", "gguf", 3 * GB, 32, 131072, 32 * 8 * 256 * 2)
    chosen = plan(small, wide, Overrides(flash_attn="off"))
    assert (chosen.cache_type_k, chosen.cache_type_v) == ("q8_0", "f16")
    assert any("KV cache in q8_0 keys and f16 values (77% of f16's memory)" in r for r in chosen.reasons), (
        chosen.reasons
    )


def test_a_context_that_does_not_fit_even_in_q8_0_shrinks_until_it_does() -> None:
    small = HARDWARE["8 GB RAM machine"]
    wider = ModelProfile("wider", "gguf", 3 * GB, 32, 131072, 32 * 8 * 256 * 8)  # 4 GiB of f16 per 8192 tokens
    chosen = plan(small, wider)
    assert chosen.fits
    assert (chosen.cache_type_k, chosen.ctx_size) == ("q8_0", 2048)
    assert "context 2048 tokens: a longer one would not fit in memory" in chosen.reasons


def test_a_draft_model_is_planned_beside_the_model_it_drafts_for() -> None:
    model = MODELS["Llama 3.1 8B Q4_K_M"]
    draft = ModelProfile("llama3.2:1b", "gguf", int(1.32 * GB), 16, 131072, 16 * 8 * 64 * 2 * 2, "Q8_0")
    pair = with_draft(model, draft)
    laptop = HARDWARE["laptop without GPU"]
    alone, both = plan(laptop, model), plan(laptop, pair)
    assert (both.ctx_size, both.parallel) == (alone.ctx_size, alone.parallel) == (8192, 1)
    # its weights, and a KV cache as long as the model's in each slot
    assert both.memory_bytes - alone.memory_bytes == draft.size_bytes + 16 * 8 * 64 * 2 * 2 * 8192
    gpu = HARDWARE["RTX 3060 12 GB"]
    assert plan(gpu, model).gpu_layers == 33
    assert plan(gpu, pair).gpu_layers == 31  # the two do not both fit on the GPU whole


def test_the_kv_cache_types_asked_for_win_and_a_model_that_fits_keeps_f16() -> None:
    laptop = HARDWARE["laptop without GPU"]
    smol = MODELS["SmolLM2 135M Q4_1"]
    assert (plan(laptop, smol).cache_type_k, plan(laptop, smol).cache_type_v) == ("f16", "f16")
    asked = plan(laptop, smol, Overrides(cache_type_k="q4_0", cache_type_v="q8_0"))
    assert (asked.cache_type_k, asked.cache_type_v) == ("q4_0", "q8_0")
    assert "KV cache of q4_0 keys and q8_0 values, as asked" in asked.reasons
    only_keys = plan(laptop, smol, Overrides(cache_type_k="q8_0"))
    assert (only_keys.cache_type_k, only_keys.cache_type_v) == ("q8_0", "f16")


@pytest.mark.parametrize(
    ("machine", "size_gb", "fits"),
    [
        ("laptop without GPU", 4.9, True),
        ("laptop without GPU", 8.5, False),  # 8 GB Q8_0 of an 8B model in 9 GiB: no room for its cache
        ("8 GB RAM machine", 2.0, True),
        ("8 GB RAM machine", 4.9, False),
        ("RTX 3060 12 GB", 8.5, True),
        ("RTX 3060 12 GB", 16.1, False),  # the GPU is what counts when llama.cpp can use it
        ("Apple M2 16 GB", 6.6, True),
    ],
)
def test_fits_in_says_which_files_a_machine_can_hold(machine: str, size_gb: float, fits: bool) -> None:
    hw = HARDWARE[machine]
    assert fits_in(hw, int(size_gb * GB)) is fits


def test_a_named_engine_serves_a_hugging_face_folder_and_says_it_was_asked() -> None:
    sglang = dataclasses.replace(
        HARDWARE["H100 80 GB with vLLM"],
        backends=(*HARDWARE["H100 80 GB with vLLM"].backends, BackendAvailability("sglang", True, "sglang 0.5")),
    )
    chosen = plan(sglang, MODELS["Llama 3.1 8B safetensors"], Overrides(engine="sglang"))
    assert chosen.backend == "sglang"
    assert chosen.reasons[0].endswith(", as asked (--engine sglang)")


def test_the_default_engine_for_a_hugging_face_folder_is_vllm_and_says_how_to_pick_another() -> None:
    chosen = plan(HARDWARE["H100 80 GB with vLLM"], MODELS["Llama 3.1 8B safetensors"])
    assert chosen.backend == "vllm"
    assert "the default engine (--engine sglang, tgi or trtllm picks another)" in chosen.reasons[0]


def test_a_named_engine_that_is_not_installed_is_refused_with_how_to_get_it() -> None:
    with pytest.raises(PlanError) as refused:
        plan(HARDWARE["H100 80 GB with vLLM"], MODELS["Llama 3.1 8B safetensors"], Overrides(engine="tgi"))
    assert refused.value.message == "the tgi backend is not available here: tgi was not probed"
    assert refused.value.hint.startswith("run TGI's container")


def test_the_engine_setting_leaves_gguf_files_on_llama_cpp() -> None:
    assert plan(HARDWARE["RTX 4090 24 GB"], MODELS["Llama 3.1 8B Q4_K_M"], Overrides(engine="sglang")).backend == (
        "llamacpp"
    )


def test_a_built_tensorrt_llm_engine_chosen_by_its_files_keeps_tensorrt_llms_gpu_rule_and_says_why() -> None:
    hw = HARDWARE["RTX 4090 24 GB"]  # under vLLM's 40 GiB
    hw = dataclasses.replace(hw, backends=(*hw.backends, BackendAvailability("trtllm", True, "trtllm-serve 1.0")))
    engine = ModelProfile("llama-engine", "hf", 0, None, 131072)
    chosen = plan(hw, engine, Overrides(engine="trtllm", engine_asked=False))
    assert (chosen.backend, chosen.device) == ("trtllm", "cuda:0")
    assert chosen.reasons[0] == (
        "TensorRT-LLM on NVIDIA GeForce RTX 4090 (24.0 GiB, compute capability (8, 9)): the folder is a built "
        "TensorRT-LLM engine, which only TensorRT-LLM runs"
    )
