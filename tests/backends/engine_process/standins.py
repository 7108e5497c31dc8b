"""Stand-ins for the engines, started by each engine's own command line: ``python -m
vllm.entrypoints.openai.api_server`` and ``python -m sglang.launch_server`` (packages of those names on
PYTHONPATH), ``text-generation-launcher`` and ``trtllm-serve`` (programs of those names on PATH). Each parses the
flags its engine documents (an unknown flag, or a bad value, exits 2 as the engine's parser would), records its
argv (as its parser reads it), its command line (as the OS shows it to other users) and key, and then becomes a
real OpenAI server: ``localinfer serve`` of SmolLM2, with the engine's key (where it takes one) as localinfer's.
SGLang's stand-in is started through ``keyed_main``, as SGLang is."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

# The flags are the engines' own, from their docs and argument parsers (see each recipe's module):
# vLLM vllm/engine/arg_utils.py; SGLang python/sglang/srt/server_args.py; TGI launcher/src/main.rs;
# TensorRT-LLM tensorrt_llm/commands/serve.py.
STANDIN = r"""
import argparse, json, os, sys
engine = ENGINE
p = argparse.ArgumentParser(prog=engine, allow_abbrev=False)
key = None
if engine == "vllm":
    p.add_argument("--model", required=True)
    p.add_argument("--host")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--tensor-parallel-size", "-tp", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--enforce-eager", action="store_true")
    key = os.environ.get("VLLM_API_KEY")
elif engine == "sglang":
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--host")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--api-key")
    p.add_argument("--served-model-name")
    p.add_argument("--context-length", type=int)
    p.add_argument("--tp-size", "--tensor-parallel-size", "--tp", type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e5m2", "fp8_e4m3"])
    p.add_argument("--max-running-requests", type=int)
elif engine == "tgi":
    p.add_argument("--model-id", required=True)
    p.add_argument("--hostname")
    p.add_argument("--port", "-p", type=int, required=True)
    p.add_argument("--max-total-tokens", type=int)
    p.add_argument("--num-shard", type=int)
    p.add_argument("--cuda-memory-fraction", type=float)
    p.add_argument("--kv-cache-dtype", choices=["fp8_e4m3fn", "fp8_e5m2"])
    p.add_argument("--max-concurrent-requests", type=int)
    p.add_argument("--usage-stats", choices=["on", "off", "no-stack"])
    key = os.environ.get("API_KEY")  # clap's env for --api-key
elif engine == "trtllm":
    p.add_argument("model")
    p.add_argument("--host")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--backend", choices=["pytorch", "tensorrt", "trt", "_autodeploy"])
    p.add_argument("--tokenizer")
    p.add_argument("--tensor_parallel_size", "--tp_size", type=int)
    p.add_argument("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction", type=float)
    p.add_argument("--max_seq_len", type=int)
    p.add_argument("--max_batch_size", type=int)
    p.add_argument("--config", "--extra_llm_api_options")
args = p.parse_args()
key = key or getattr(args, "api_key", None)
if os.environ.get("STANDIN_RECORD"):
    with open(os.environ["STANDIN_RECORD"], "w") as f:
        cmdline = open("/proc/self/cmdline", "rb").read().decode().split("\0")  # as ps shows any user
        json.dump({"argv": sys.argv[1:], "key": key, "cmdline": cmdline}, f)
if os.environ.get("STANDIN_FAIL"):  # a line the engine writes when it fails, then its exit
    print(os.environ["STANDIN_FAIL"], flush=True)
    sys.exit(1)
host = getattr(args, "host", None) or getattr(args, "hostname", None)
ctx = getattr(args, "max_model_len", None) or getattr(args, "context_length", None)
ctx = ctx or getattr(args, "max_total_tokens", None) or getattr(args, "max_seq_len", None) or 512
name = getattr(args, "served_model_name", None) or getattr(args, "model_id", None) or getattr(args, "model", None)
name = name[0] if isinstance(name, list) else name
name = os.path.basename(name) if name.startswith("/") else name  # a path is no localinfer model name
serve = [sys.executable, "-m", "localinfer.app.cli", "serve", os.environ["STANDIN_GGUF"], "--host", host,
         "--port", str(args.port), "--alias", name, "--ctx-size", str(min(ctx, 1024)), "--parallel", "1",
         "--threads", "1"]
env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOCALINFER_API_KEY")}
if key:
    env["LOCALINFER_API_KEY"] = key
os.execve(sys.executable, serve, env)
"""

MODULES = {"vllm": "vllm/entrypoints/openai/api_server.py", "sglang": "sglang/launch_server.py"}
PROGRAMS = {"tgi": "text-generation-launcher", "trtllm": "trtllm-serve"}


def install_standin(engine: str, where: Path) -> dict[str, str]:
    """Put ``engine``'s stand-in where its recipe's command finds it, under ``where``; the environment additions
    (PYTHONPATH or PATH) that make the command find it."""
    script = STANDIN.replace("ENGINE", repr(engine), 1)
    if engine in MODULES:
        module = where / "site" / MODULES[engine]
        module.parent.mkdir(parents=True, exist_ok=True)
        for folder in [module.parent, *module.parent.relative_to(where / "site").parents]:
            (where / "site" / folder / "__init__.py").touch()
        module.write_text(script)
        return {"PYTHONPATH": str(where / "site")}
    program = where / "bin" / PROGRAMS[engine]
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!{sys.executable}\n{script}")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{program.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
