"""``localinfer hw`` run as a user runs it, and its report rendered from hand-written profiles."""

from __future__ import annotations

import json
from pathlib import Path

from localinfer.app.commands.hw import render_report
from localinfer.config import Settings
from localinfer.hardware.profile import (
    BackendAvailability,
    CPUInfo,
    GiB,
    GPUInfo,
    HardwareProfile,
    MemoryInfo,
)
from localinfer.models.metadata import read_gguf_info
from localinfer.models.store import Manifest, ModelStore, hf_manifest
from tests.app.test_cli import localinfer  # the real command in a child process, with its own home
from tests.backends.engine_process.conftest import write_trtllm_engine
from tests.hf_folder import write_hf_folder


def section(output: str, title: str) -> list[str]:
    """The rows under ``title`` in a report, without their indent."""
    lines = output.splitlines()
    start = lines.index(f"  {title}") + 1
    rows: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line[4:])
    return rows


def test_hw_prints_the_machines_report(tmp_path: Path) -> None:
    result = localinfer("hw", home=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for title in ("System", "CPU", "Memory", "GPUs", "Backends", "ONNX Runtime providers"):
        assert f"  {title}" in out.splitlines()
    cores = next(row for row in section(out, "CPU") if row.startswith("cores"))
    assert "physical" in cores and "logical" in cores
    assert section(out, "GPUs") == ["none found"]
    backends = {row.split()[0]: row for row in section(out, "Backends")}
    assert "available: llama-cpp-python" in backends["llamacpp"]
    assert "not available: vllm is not installed" in backends["vllm"]
    assert section(out, "Memory")[0].startswith("total") and "GiB" in section(out, "Memory")[0]


def test_hw_json_prints_a_profile_that_loads_back(tmp_path: Path) -> None:
    result = localinfer("hw", "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    profile = HardwareProfile.from_json(data)
    assert json.loads(json.dumps(profile.to_json())) == data
    assert profile.cpu.logical_cores >= 1 and profile.memory.total > 0
    assert profile.gpus == ()
    assert profile.backend("llamacpp").available and not profile.backend("vllm").available


def test_hw_refuses_a_timeout_that_is_not_positive(tmp_path: Path) -> None:
    result = localinfer("hw", "--timeout", "0", home=tmp_path)
    assert result.returncode == 2
    assert "positive number of seconds" in result.stderr


def test_the_report_shows_each_gpu_the_cgroup_cap_and_the_notes() -> None:
    profile = HardwareProfile(
        os="linux",
        os_version="Ubuntu 22.04.4 LTS (kernel 6.8.0)",
        cpu=CPUInfo("AMD EPYC 9654", "x86_64", 96, 192, ("avx", "avx2", "avx512f")),
        memory=MemoryInfo(total=64 * GiB, available=60 * GiB, cgroup_limit=64 * GiB),
        gpus=(
            GPUInfo(
                "nvidia", "NVIDIA H100 80GB HBM3", 0, 80 * GiB, 79 * GiB, (9, 0), "550.54.15", "cuda", source="nvml"
            ),
            GPUInfo("nvidia", "NVIDIA GB10", 1, 128 * GiB, 100 * GiB, (12, 1), None, "cuda", True, "nvidia-smi"),
        ),
        backends=(
            BackendAvailability("llamacpp", True, "llama-cpp-python 0.3.36, with CUDA", "0.3.36", True),
            BackendAvailability("vllm", False, "vllm is not installed"),
        ),
        onnx_providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
        notes=("NVIDIA GB10 reports no memory of its own: it is taken to share the RAM.",),
    )
    report = render_report(profile)
    assert section(report, "Memory") == [
        "total               64.0 GiB",
        "available           60.0 GiB",
        "cgroup limit        64.0 GiB (the container's limit caps the RAM)",
    ]
    assert section(report, "GPUs") == [
        "GPU 0               NVIDIA H100 80GB HBM3 (nvidia)",
        "  memory            79.0 GiB free of 80.0 GiB",
        "  compute           9.0",
        "  driver            550.54.15",
        "  api               cuda, found by nvml",
        "GPU 1               NVIDIA GB10 (nvidia)",
        "  memory            128.0 GiB usable, shared with the CPU (unified memory)",
        "  compute           12.1",
        "  api               cuda, found by nvidia-smi",
    ]
    assert section(report, "Backends") == [
        "llamacpp            available: llama-cpp-python 0.3.36, with CUDA",
        "vllm                not available: vllm is not installed",
    ]
    assert section(report, "ONNX Runtime providers") == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert section(report, "Notes") == list(profile.notes)


def test_hw_plan_explains_how_a_real_model_would_run_here(tmp_path: Path, smollm2: Manifest) -> None:
    result = localinfer("hw", "--plan", str(smollm2.path), home=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = section(result.stdout, f"Plan for {smollm2.path}")
    assert rows[:3] == ["backend             llamacpp", "device              cpu", "gpu layers          0"]
    assert "context             8192 tokens" in rows
    assert "  - no GPU was found: every layer runs on the CPU" in rows


def test_hw_plan_json_carries_the_overrides(tmp_path: Path, smollm2: Manifest) -> None:
    result = localinfer("hw", "--json", "--plan", str(smollm2.path), "--ctx", "2048", "--parallel", "2", home=tmp_path)
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)["plan"]
    assert (planned["backend"], planned["ctx_size"], planned["parallel"]) == ("llamacpp", 2048, 2)
    assert "context 2048 tokens, as asked" in planned["reasons"]


def test_hw_plan_counts_a_draft_model_beside_the_model(tmp_path: Path, smollm2: Manifest) -> None:
    args = ("hw", "--json", "--plan", str(smollm2.path), "--ctx", "2048", "--parallel", "1")
    alone = json.loads(localinfer(*args, home=tmp_path).stdout)["plan"]
    result = localinfer(*args, "--draft", str(smollm2.path), home=tmp_path)
    assert result.returncode == 0, result.stderr
    both = json.loads(result.stdout)["plan"]
    assert both["draft"] == str(smollm2.path) and alone["draft"] is None
    info = read_gguf_info(smollm2.path)  # the draft's weights, and its f16 keys and values for 2048 tokens
    assert info.block_count and info.head_count_kv and info.embedding_length and info.head_count
    kv = info.block_count * info.head_count_kv * 2 * (info.embedding_length // info.head_count) * 2 * 2048
    assert both["memory_bytes"] - alone["memory_bytes"] == smollm2.size + kv


def test_hw_plan_refuses_a_draft_model_that_is_not_a_gguf_in_one_line(tmp_path: Path, smollm2: Manifest) -> None:
    folder = write_hf_folder(tmp_path / "tiny-llama")  # a Hugging Face folder: vLLM's, which drafts its own way
    result = localinfer("hw", "--plan", str(smollm2.path), "--draft", str(folder), home=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "localinfer: --draft plans a GGUF model with a GGUF draft model: llama.cpp is what drafts with one",
        "hint: drop --draft, or name two GGUF models of one family",
    ]


def test_hw_plan_refuses_what_cannot_run_here_in_one_line(tmp_path: Path, smollm2: Manifest) -> None:
    result = localinfer("hw", "--plan", str(smollm2.path), "--backend", "vllm", home=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "localinfer: vLLM is not used for GGUF files here",
        "hint: serve it with llama.cpp (the default)",
    ]
    alone = localinfer("hw", "--ctx", "4096", home=tmp_path)
    assert alone.returncode == 1 and "go with --plan MODEL" in alone.stderr


def test_hw_plan_plans_a_built_tensorrt_llm_engine_folder_on_tensorrt_llm_by_path_or_name(tmp_path: Path) -> None:
    engine = write_trtllm_engine(tmp_path / "llama-engine")
    ModelStore(Settings(home=tmp_path).models_dir).register(hf_manifest(engine, name="org/llama-engine"))
    for ref, name in ((str(engine), "llama-engine"), ("org/llama-engine", "org/llama-engine")):
        result = localinfer("hw", "--plan", ref, home=tmp_path)  # this machine has no NVIDIA GPU
        assert result.returncode == 1
        assert result.stderr.splitlines()[0] == (
            f"localinfer: {name} needs TensorRT-LLM, which needs an NVIDIA GPU of compute capability 8.0 or more"
        )


def test_the_report_says_in_one_line_that_tensorrt_llm_checks_no_key() -> None:
    h100 = GPUInfo("nvidia", "NVIDIA H100 80GB HBM3", 0, 80 * GiB, 79 * GiB, (9, 0), "550.54.15", "cuda")
    profile = HardwareProfile(
        os="linux",
        os_version="6.8",
        cpu=CPUInfo("test cpu", "x86_64", 8, 16, ("avx2",)),
        memory=MemoryInfo(total=64 * GiB, available=60 * GiB),
        gpus=(h100,),
        backends=(
            BackendAvailability("sglang", True, "sglang 0.5.4", "0.5.4"),
            BackendAvailability("trtllm", True, "trtllm-serve on PATH"),
        ),
    )
    assert section(render_report(profile), "Backends") == [
        "sglang              available: sglang 0.5.4",
        "trtllm              available: trtllm-serve on PATH; TensorRT-LLM checks no key: it listens on 127.0.0.1 "
        "only, but other local users can reach it",
    ]
