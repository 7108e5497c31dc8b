#!/usr/bin/env bash
# Proves localinfer's CUDA path on a GPU machine that has CUDA's compiler but no network (this workplace's lent
# machine): llama-cpp-python built there with CUDA, then `localinfer hw` and `localinfer serve` with every layer on
# the GPU, with --gpu-layers 0, and with the GPU hidden (CUDA_VISIBLE_DEVICES=""), compared by bench/gpu_check.py
# (docs/benchmarks.md, "GPU: CUDA offload on an H200").
#
# What travels to such a machine is capped (64 MiB a call), so the work is cut in two parts:
#
#   bench/gpu_check.sh prepare [MODEL.gguf]    here, with network: writes .gpu/ (add "/.gpu/" to .git/info/exclude)
#       .gpu/c1/  llama-cpp-python's sdist without models, docs, tests and other backends' sources (~5 MB), the
#                 runtime dependencies the device lacks as cp312 manylinux wheels (~8 MB), localinfer's src/ as
#                 committed (HEAD), and the model's first bytes (model.part-aa, 42 MiB)
#       .gpu/c2/  the model's remaining bytes (model.part-ab, at most ~55 MiB); the model defaults to SmolLM2-135M
#                 Instruct Q4_1 (98 MB)
#   bench/gpu_check.sh build     on the GPU machine (carry .gpu/c1): builds the CUDA wheel (CMAKE_ARGS, default
#                                sm_90; 284 s on the 16 cores of an H200 machine) into /tmp/gpu-check/site beside the
#                                wheels, then asks llama.cpp which devices it sees and runs `localinfer hw`
#   bench/gpu_check.sh check     on the same, still warm machine (carry .gpu/c2): joins the model from
#                                /tmp/gpu-check/c1 and .gpu/c2 and runs bench/gpu_check.py on it
#   bench/gpu_check.sh all       build, then check (where one call can carry both parts)
#
# With this workplace's device tool, the two calls go back to back (a machine idle for 30 s is given back; it keeps
# /tmp while warm, but removes the ignored files of the repository that a call does not carry):
#   run(carry=[".gpu/c1"], timeout_s=570, command="OUT=$OUT bash bench/gpu_check.sh build")
#   run(carry=[".gpu/c2"], timeout_s=300, command="OUT=$OUT bash bench/gpu_check.sh check")
# Everything is logged to $OUT/log (default /tmp/gpu-check-out) with each step under `timeout`.
#
# The RPC check (docs/benchmarks.md, "RPC workers on a GPU machine"; #32) builds llama.cpp itself there, once, with
# CUDA and RPC and as shared libraries: llama-server and ggml-rpc-server for the comparison, and the libraries that
# llama-cpp-python's Python files (carried) load, so both engines run the very same compiled code:
#   bench/gpu_check.sh prepare-rpc [MODEL.gguf]   here: .gpu/r1 (source with the server and RPC tools, wheels,
#                                                 llama_cpp's Python files, the model's first 40 MiB) and .gpu/r2
#   run(carry=[".gpu/r1"], timeout_s=560, command="OUT=$OUT bash bench/gpu_check.sh build-rpc")
#   run(carry=[".gpu/r2"], timeout_s=480, command="OUT=$OUT bash bench/gpu_check.sh check-rpc")
# check-rpc serves the model as "smollm2" (bench/rpc.py's default name) whatever file prepare-rpc was given, and
# exits 1 when a step failed. It runs bench/rpc.py twice: with the workers lending the GPU (the servers' GPU hidden), and on the CPU
# alone (the GPU hidden from all), where 16 cores leave the servers' Python off the workers' cores.
#
# llama-server against localinfer (bench/gpu_compare.py, docs/benchmarks.md; #42), in one call that builds llama.cpp
# with CUDA and flash attention for one architecture as shared libraries (llama-server, llama-quantize, and the
# libraries llama-cpp-python's carried Python files load), makes random-weight Llama models of SmolLM2's tokenizer
# there and compares the two servers on them:
#   bench/gpu_check.sh prepare-compare [MODEL.gguf]   here: .gpu/g1 (source, wheels, Python files, tokenizer.gguf)
#   run(carry=[".gpu/g1"], timeout_s=600, command="OUT=$OUT bash bench/gpu_check.sh compare")
#   run(carry=[".gpu/g1"], command="OUT=$OUT MODELS=... bash bench/gpu_check.sh compare-again")  (same warm machine)
# MODELS (default 3b-Q4_K_M,3b-F16,8b-Q4_K_M), FA (default on,off), ROUNDS (default 4), CUDA_FA (the kernels,
# default ON), BUILD_TIMEOUT (default 440 s) and COMPARE_TIMEOUT (default 480 s) size it to the time at hand;
# GPU_CHECK_DEADLINE (epoch seconds) ends the comparison in time for the call to bring back what it measured;
# LOCALINFER_ARGS (default "--spec off --no-last-token-alone") are localinfer serve's flags there, COMPARE_ARGS more gpu_compare.py flags.
# Before the servers, bench/prefill_probe.py times the prefill of each model of PROBE (default 1b-F16; "" skips it,
# space-separated names) through llama.cpp's C API, in llama-server's context and localinfer's, and bench/step_gap.py
# the host's time between two steps of one stream (PROBE_TIMEOUT, 150 s each).
#
# Environment: OUT, CMAKE_ARGS (default "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"), JOBS (default: all CPUs),
# ROUNDS (default 5), TOKENS (default 256), CPU_ONLY=1 (check without a GPU), SERVE_ARGS (more `serve` flags for
# every server, e.g. "--spec off"), GPU_CHECK_KEEP (default /tmp/gpu-check), PYTHON (default python3: 3.12 on the
# lent machine, which the wheels fit).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
gpu=$root/.gpu
OUT=${OUT:-/tmp/gpu-check-out}
# The lent machine keeps /tmp between calls while it stays warm, but not ignored files in the repository that a call
# does not carry: what build makes and check needs lives here.
keep=${GPU_CHECK_KEEP:-/tmp/gpu-check}
mkdir -p "$OUT"
python=${PYTHON:-python3}
step() { printf '\n=== %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }
# Seconds for a last step: $1, or less where GPU_CHECK_DEADLINE (epoch seconds: the device call's end, less a margin
# for bringing $OUT back) comes sooner, so that a step cut short still leaves its partial results to be returned.
seconds_left() {
  local want=$1 left
  [ -n "${GPU_CHECK_DEADLINE:-}" ] || { echo "$want"; return; }
  left=$((GPU_CHECK_DEADLINE - $(date +%s)))
  [ "$left" -lt "$want" ] && want=$left
  [ "$want" -lt 1 ] && want=1
  echo "$want"
}
fail() {
  echo "gpu_check: $*" >&2
  exit 1
}

# What `localinfer serve` and `hw` import that the lent machine's Python lacks (or has in another version), at the
# versions of .venv, as cp312 manylinux wheels into $1.
wheels() {
  # The machine has numpy, jinja2, psutil, httpx, click, rich, pyyaml, uvloop, prometheus-client.
  local specs=() name
  for name in fastapi starlette pydantic pydantic_core pydantic-settings python-dotenv typing-inspection \
    annotated-types annotated-doc typing_extensions anyio sniffio uvicorn h11 httptools gguf llguidance diskcache \
    platformdirs httpx2 httpcore2 truststore opentelemetry-api idna filelock python-multipart; do
    specs+=("$name==$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$name'))")")
  done
  local platforms=()
  for p in manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${p}_x86_64")
  done
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$1" "${specs[@]}" || fail "pip download failed"
}

# The pinned llama-cpp-python version and its sdist in the build cache (bench/build-llama-cpp downloads it).
sdist_version() { sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml; }
sdist_path() {
  local sdist
  sdist=${LOCALINFER_BUILD_CACHE:-$HOME/.cache/localinfer/build}/sdist/llama_cpp_python-$(sdist_version).tar.gz
  [ -f "$sdist" ] || fail "no sdist at $sdist (bench/build-llama-cpp downloads it)"
  printf '%s' "$sdist"
}

# The model to carry: the one named ($1), else the tests' SmolLM2; $2 names the command for the hint.
model_path() {
  local model=$1
  [ -n "$model" ] || model=$(find /tmp/pytest-of-*/ -name SmolLM2.gguf -size +90M 2>/dev/null | head -1)
  [ -f "$model" ] || fail "name a .gguf model: bench/gpu_check.sh $2 MODEL.gguf"
  printf '%s' "$model"
}

# The model $1 cut in two, for two calls: its first $4 MiB and its sha256 into $2, the rest into $3.
split_model() {
  sha256sum "$1" | cut -d' ' -f1 >"$2/model.sha256"
  head -c "$4M" "$1" >"$2/model.part-aa"
  tail -c +$(($4 * 1024 * 1024 + 1)) "$1" >"$3/model.part-ab"
  du -sh "$2" "$3"
}

prepare() {
  local model sdist sdist_version
  model=$(model_path "${1:-}" prepare) || exit 1
  sdist=$(sdist_path) || exit 1
  sdist_version=$(sdist_version)
  rm -rf "$gpu/c1" "$gpu/c2" && mkdir -p "$gpu/c1/whl" "$gpu/c2"
  local tmp
  tmp=$(mktemp -d)
  tar xzf "$sdist" -C "$tmp"
  local s=$tmp/llama_cpp_python-$sdist_version
  local v=$s/vendor/llama.cpp
  # Only the library, ggml's CPU and CUDA backends and tools/mtmd (LLAVA_BUILD) are built; the rest is not needed.
  rm -rf "$s"/{.git,.github,docs,examples,tests,docker} "$v"/{.git,.github,.devops,docs,media,models,examples,pocs} \
    "$v"/{benches,tests,app,gguf-py,conversion,ci,skills,requirements,scripts,grammars} "$v"/convert_*.py
  find "$v/tools" -mindepth 1 -maxdepth 1 ! -name mtmd -exec rm -rf {} +
  find "$v/ggml/src" -mindepth 1 -maxdepth 1 -type d -name 'ggml-*' \
    ! -name ggml-cpu ! -name ggml-cuda ! -name ggml-blas ! -name ggml-rpc -exec rm -rf {} +
  mv "$s" "$tmp/llama-cpp-python"
  tar czf "$gpu/c1/llama-cpp-python.tar.gz" -C "$tmp" llama-cpp-python
  rm -rf "$tmp"
  wheels "$gpu/c1/whl"
  git archive HEAD src | tar x -C "$gpu/c1"
  basename "$model" >"$gpu/c1/model.name"
  split_model "$model" "$gpu/c1" "$gpu/c2" 42
}

prepare_rpc() {
  local model sdist sdist_version
  model=$(model_path "${1:-}" prepare-rpc) || exit 1
  sdist=$(sdist_path) || exit 1
  sdist_version=$(sdist_version)
  rm -rf "$gpu/r1" "$gpu/r2" && mkdir -p "$gpu/r1/whl" "$gpu/r2"
  local tmp
  tmp=$(mktemp -d)
  tar xzf "$sdist" -C "$tmp" "llama_cpp_python-$sdist_version/vendor/llama.cpp"
  local v=$tmp/llama_cpp_python-$sdist_version/vendor/llama.cpp
  # The tools stay (tools/CMakeLists.txt adds each), but not the web UI's sources: without LLAMA_BUILD_UI and
  # LLAMA_USE_PREBUILT_UI the server is built with no UI (scripts/ui-assets.cmake).
  rm -rf "$v"/{.git,.github,.devops,docs,media,models,examples,pocs,benches,tests,gguf-py,conversion,ci} \
    "$v"/{skills,requirements,grammars} "$v"/convert_*.py "$v"/tools/ui/{src,tests,static,package-lock.json}
  find "$v/scripts" -mindepth 1 ! -name '*.cmake' -exec rm -rf {} +
  find "$v/ggml/src" -mindepth 1 -maxdepth 1 -type d -name 'ggml-*' \
    ! -name ggml-cpu ! -name ggml-cuda ! -name ggml-blas ! -name ggml-rpc -exec rm -rf {} +
  tar czf "$gpu/r1/llama.cpp.tar.gz" -C "$(dirname "$v")" llama.cpp
  rm -rf "$tmp"
  local site
  site=$(.venv/bin/python -c 'import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).parent)')
  mkdir -p "$gpu/r1/py"
  (cd "$(dirname "$site")" && tar cf - --exclude=lib --exclude=__pycache__ llama_cpp) | tar xf - -C "$gpu/r1/py"
  wheels "$gpu/r1/whl"
  split_model "$model" "$gpu/r1" "$gpu/r2" 40
}

build_rpc() {
  build_shared r1 OFF llama llama-server ggml-rpc-server || exit 1
  step "localinfer hw (this machine as a worker)"
  LOCALINFER_HOME=/tmp/gpu-check-home timeout 120 $python -m localinfer.app.cli hw
}

# llama.cpp built here with CUDA as shared libraries, from the carried .gpu/$1 (prepare-rpc's or prepare-compare's
# layout), flash attention kernels $2 (ON or OFF; for one architecture, CUDA_ARCH, default 90), targets $3...; then
# llama-cpp-python's Python files and the wheels installed into $keep/site with its lib linked to the build.
build_shared() {
  local carried=$1 fa=$2
  shift 2
  [ -f "$gpu/$carried/llama.cpp.tar.gz" ] || fail "no .gpu/$carried here: carry it (bench/gpu_check.sh prepare-...)"
  step "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  nvcc --version | tail -1
  $python --version
  echo "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  rm -rf "$keep" && mkdir -p "$keep" && cp -a "$gpu/$carried" "$keep/$carried"
  step "CUDA libraries"
  local extra extra_args
  extra=$(cuda_locations) || exit 1
  read -ra extra_args <<<"$extra" # -D flags naming paths, none with a space
  step "build llama.cpp (CUDA, flash attention $fa, shared): $*"
  tar xzf "$keep/$carried/llama.cpp.tar.gz" -C "$keep"
  local started=$SECONDS
  local args=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON
    "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90}" "-DGGML_CUDA_FA=$fa" -DGGML_RPC=ON -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)
  cmake -S "$keep/llama.cpp" -B "$keep/build" -G Ninja "${args[@]}" "${extra_args[@]}" >"$keep/cmake.log" 2>&1 ||
    { tail -40 "$keep/cmake.log"; exit 1; }
  timeout "${BUILD_TIMEOUT:-440}" cmake --build "$keep/build" -j "${JOBS:-$(nproc)}" --target "$@" \
    >"$keep/build.log" 2>&1
  local rc=$?
  echo "build: exit $rc after $((SECONDS - started)) s"
  if [ $rc -ne 0 ]; then
    grep -E 'error|Error' "$keep/build.log" | head -20
    tail -30 "$keep/build.log"
    exit $rc
  fi
  printf 'llama.cpp of llama-cpp-python (the pin), built on the GPU machine\ncmake: %s\n' "${args[*]}" \
    >"$keep/build/bin/BUILD-INFO"
  ls "$keep/build/bin"
  step "install into $keep/site"
  timeout 120 $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$keep/site" \
    "$keep/$carried"/whl/*.whl || exit 1
  cp -a "$keep/$carried/py/llama_cpp" "$keep/site/llama_cpp"
  # A link, not copies: libllama finds its libggml by its RUNPATH (the build folder), and a library loaded from
  # two files would be two ggml registries (the RPC devices registered in one, the model loaded by the other).
  ln -s "$keep/build/bin" "$keep/site/llama_cpp/lib"
  env_site
}

# llama-server against localinfer on random-weight Llama models made there (bench/gpu_compare.py, #42): prepare
# carries the llama.cpp source, llama-cpp-python's Python files, the wheels and SmolLM2's tokenizer (no model).
prepare_compare() {
  local model
  model=$(model_path "${1:-}" prepare-compare) || exit 1
  prepare_rpc "$model" >/dev/null || exit 1
  rm -rf "$gpu/g1" && mv "$gpu/r1" "$gpu/g1" && rm -rf "$gpu/r2" "$gpu/g1"/model.*
  .venv/bin/python bench/random_gguf.py "$model" "$gpu/g1/tokenizer.gguf" --tokenizer-only
  du -sh "$gpu/g1"
}

compare() {
  build_shared g1 "${CUDA_FA:-ON}" llama llama-server llama-quantize || exit 1
  probe
  step "bench/gpu_compare.py"
  local models=${MODELS:-3b-Q4_K_M,3b-F16,8b-Q4_K_M}
  timeout "$(seconds_left "${COMPARE_TIMEOUT:-480}")" $python bench/gpu_compare.py --models "$models" --fa "${FA:-on,off}" \
    --rounds "${ROUNDS:-4}" --tokenizer "$keep/g1/tokenizer.gguf" --llama-cpp-bin "$keep/build/bin" \
    --work /tmp/gpu-compare --out "$OUT/gpu-compare.json" --localinfer-args "${LOCALINFER_ARGS:---spec off --no-last-token-alone}" \
    ${COMPARE_ARGS:-}
  local rc=$?
  step "nvidia-smi after"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
  return $rc
}

# bench/prefill_probe.py on each model of PROBE (default 1b-F16, the one whose prefill was 0.72x; "" skips it):
# llama-server's context and localinfer's, and one change at a time between them, without the servers; then
# bench/step_gap.py: the host's time between two steps of one stream, tokens handed over before or after the next
# step is queued (the 1B's one stream was 0.95x).
probe() {
  local name fa=${FA:-on}
  for name in ${PROBE-1b-F16}; do
    step "bench/prefill_probe.py $name"
    timeout "$(seconds_left "${PROBE_TIMEOUT:-150}")" $python bench/prefill_probe.py "$name" --fa "${fa%%,*}" \
      --tokenizer "$keep/g1/tokenizer.gguf" --llama-cpp-bin "$keep/build/bin" --work /tmp/gpu-compare \
      --out "$OUT/prefill-probe-$name.json" 2>&1 | grep -v '^llama_\|^load\|^print_info\|^{'
    step "bench/step_gap.py $name"
    timeout "$(seconds_left "${PROBE_TIMEOUT:-150}")" $python bench/step_gap.py --model "/tmp/gpu-compare/$name.gguf" \
      --ways cpu,gpu --serve-args "--gpu-layers 99 --flash-attn $fa" --out "$OUT/step-gap-$name.json" 2>&1 | grep -v '^{'
  done
}

# Again on the same warm machine, without building: the build and site that compare left under $keep.
compare_again() {
  [ -x "$keep/build/bin/llama-server" ] && [ -d "$keep/site" ] || fail "no build under $keep: run compare first"
  env_site
  probe
  step "bench/gpu_compare.py (the build already here)"
  timeout "$(seconds_left "${COMPARE_TIMEOUT:-480}")" $python bench/gpu_compare.py --models "${MODELS:-3b-Q4_K_M}" --fa "${FA:-on}" \
    --rounds "${ROUNDS:-4}" --tokenizer "$keep/g1/tokenizer.gguf" --llama-cpp-bin "$keep/build/bin" \
    --work /tmp/gpu-compare --out "$OUT/gpu-compare.json" --localinfer-args "${LOCALINFER_ARGS:---spec off --no-last-token-alone}" \
    ${COMPARE_ARGS:-}
  local rc=$?
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
  return $rc
}

check_rpc() {
  [ -d "$keep/site" ] || fail "no $keep/site here: the machine that built it was given back; run build-rpc again"
  env_site
  step "join the model into a localinfer home"
  local home=/tmp/gpu-check-home sha
  sha=$(cat "$keep/r1/model.sha256")
  mkdir -p "$home/models/blobs" "$home/models/manifests"
  cat "$keep/r1"/model.part-* "$gpu/r2"/model.part-* >"$home/models/blobs/sha256-$sha"
  [ "$(sha256sum "$home/models/blobs/sha256-$sha" | cut -d' ' -f1)" = "$sha" ] || fail "the joined model differs"
  printf '{"schema": 1, "name": "smollm2", "source": "gpu_check", "format": "gguf", "files": [{"path": "blobs/sha256-%s", "size": %s, "sha256": "%s", "owned": true}], "quantization": "Q4_1", "created": 0, "revision": null}\n' \
    "$sha" "$(stat -c %s "$home/models/blobs/sha256-$sha")" "$sha" >"$home/models/manifests/smollm2.json"
  export LOCALINFER_HOME=$home
  local failed=0
  step "a CUDA worker, the plan and a request over it (the server's GPU hidden)"
  timeout 150 $python bench/gpu_rpc_check.py --out "$OUT" || { echo "gpu_rpc_check: exit $?"; failed=1; }
  step "bench/rpc.py: workers lending the GPU, the servers' GPU hidden"
  timeout 200 $python bench/rpc.py --home "$home" --models smollm2 --groups "1 worker" --rounds "${ROUNDS:-6}" \
    --tokens 128 --hide-gpu-from-servers --llama-cpp-bin "$keep/build/bin" --out "$OUT/rpc-cuda.json" || failed=1
  step "bench/rpc.py: CPU only (the GPU hidden from every process), 16 cores"
  CUDA_VISIBLE_DEVICES="" timeout 260 $python bench/rpc.py --home "$home" --models smollm2 --groups "1 worker" \
    --rounds "${ROUNDS:-6}" --llama-cpp-bin "$keep/build/bin" --out "$OUT/rpc-cpu.json" || failed=1
  step "nvidia-smi after"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
  return $failed
}

env_site() {
  export PYTHONPATH=$keep/c1/src:$root/src:$keep/site${PYTHONPATH:+:$PYTHONPATH}
  export PYTHONUNBUFFERED=1
  [ -f "$keep/cuda-libs" ] && export LD_LIBRARY_PATH=$(cat "$keep/cuda-libs")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  return 0
}

# CMake's FindCUDAToolkit looks for cuBLAS and libcuda.so in the toolkit's folders. A machine whose toolkit has
# only the compiler has them elsewhere: cuBLAS in the Python packages (nvidia-cublas), libcuda in the driver's folder.
cuda_locations() {
  local nvcc_dir cuda_home extra="" inc lib libs
  nvcc_dir=$(dirname "$(readlink -f "$(command -v nvcc)")")
  cuda_home=${CUDA_HOME:-}
  [ -n "$cuda_home" ] || { [ -x /usr/local/cuda/bin/nvcc ] && cuda_home=/usr/local/cuda; }
  [ -n "$cuda_home" ] || cuda_home=$(dirname "$nvcc_dir")
  libs=$cuda_home/lib64
  echo "nvcc: $(command -v nvcc) -> $nvcc_dir; toolkit: $cuda_home" >&2
  if ! ls "$cuda_home"/include/cublas_v2.h "$cuda_home"/targets/*/include/cublas_v2.h >/dev/null 2>&1; then
    inc=$(find /usr /opt /lib /lib64 -name cublas_v2.h 2>/dev/null | head -1)
    lib=$(find /usr /opt /lib /lib64 -name 'libcublas.so*' 2>/dev/null | head -1)
    [ -n "$inc" ] && [ -n "$lib" ] || fail "no cuBLAS: neither in $cuda_home nor anywhere else"
    mkdir -p "$keep/cuda-link"
    ln -sf "$lib" "$keep/cuda-link/libcublas.so"
    ln -sf "$(dirname "$lib")/$(basename "$lib" | sed 's/libcublas/libcublasLt/')" "$keep/cuda-link/libcublasLt.so"
    extra+=" -DCUDA_cublas_LIBRARY=$keep/cuda-link/libcublas.so -DCUDA_cublasLt_LIBRARY=$keep/cuda-link/libcublasLt.so"
    extra+=" -DCMAKE_CUDA_FLAGS=-I$(dirname "$inc") -DCMAKE_CXX_FLAGS=-I$(dirname "$inc")"
    libs+=:$(dirname "$lib")
    echo "cuBLAS from $(dirname "$inc") and $lib" >&2
  fi
  if ! ls "$cuda_home"/lib64/libcuda.so "$cuda_home"/lib64/stubs/libcuda.so >/dev/null 2>&1; then
    lib=$(ldconfig -p | awk '/libcuda\.so/ {print $NF; exit}')
    [ -n "$lib" ] || lib=$(find /usr /opt /lib /lib64 -name 'libcuda.so*' 2>/dev/null | head -1)
    [ -n "$lib" ] || fail "no libcuda.so (the driver's library)"
    mkdir -p "$keep/cuda-link"
    ln -sf "$lib" "$keep/cuda-link/libcuda.so"
    extra+=" -DCUDA_cuda_driver_LIBRARY=$keep/cuda-link/libcuda.so"
    echo "libcuda from $lib" >&2
  fi
  printf '%s' "$libs" >"$keep/cuda-libs"
  printf '%s' "$extra"
}

build() {
  [ -f "$gpu/c1/llama-cpp-python.tar.gz" ] || fail "no .gpu/c1 here: carry it (bench/gpu_check.sh prepare)"
  step "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  nvcc --version | tail -1
  $python --version
  nproc
  rm -rf "$keep" && mkdir -p "$keep/build" && cp -a "$gpu/c1" "$keep/c1"
  step "CUDA libraries"
  local extra
  extra=$(cuda_locations) || exit 1
  step "build llama-cpp-python with CUDA"
  tar xzf "$keep/c1/llama-cpp-python.tar.gz" -C "$keep/build"
  local started=$SECONDS
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90}$extra" \
    CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} \
    timeout 480 $python -m pip wheel -v --no-build-isolation --no-deps --no-cache-dir -w "$keep/build/wheel" \
    "$keep/build/llama-cpp-python" >"$keep/build/pip.log" 2>&1
  local rc=$?
  echo "build: exit $rc after $((SECONDS - started)) s"
  grep -E '^ *-- .*(CUDA|cuBLAS|Found)|error:' "$keep/build/pip.log" | head -40
  if [ $rc -ne 0 ]; then
    tail -60 "$keep/build/pip.log"
    exit $rc
  fi
  ls -la "$keep/build/wheel"
  step "install into $keep/site"
  timeout 120 $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$keep/site" \
    "$keep"/build/wheel/*.whl "$gpu"/c1/whl/*.whl || exit 1
  env_site
  step "llama.cpp's devices"
  timeout 60 $python - <<'EOF'
import ctypes

import llama_cpp as lc
from llama_cpp import llama_cpp as low

print("llama_cpp", lc.__version__, "from", lc.__file__)
print("supports GPU offload:", bool(lc.llama_supports_gpu_offload()))
lc.llama_backend_init()
lib = low._lib  # ggml's device API is not bound in Python; libllama's handle reaches libggml's symbols
lib.ggml_backend_dev_count.restype = ctypes.c_size_t
lib.ggml_backend_dev_get.restype, lib.ggml_backend_dev_get.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
for f in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
    f.restype, f.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
size_p = ctypes.POINTER(ctypes.c_size_t)
lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size_p, size_p]
for i in range(lib.ggml_backend_dev_count()):
    dev = lib.ggml_backend_dev_get(i)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    name, desc = lib.ggml_backend_dev_name(dev).decode(), lib.ggml_backend_dev_description(dev).decode()
    print(f"device {i}: {name} ({desc}) free {free.value >> 20} MiB of {total.value >> 20} MiB")
EOF
  step "localinfer hw"
  LOCALINFER_HOME=/tmp/gpu-check-home timeout 120 $python -m localinfer.app.cli hw
}

check() {
  [ -d "$keep/site" ] || fail "no $keep/site here: the machine that built it was given back; run build again"
  env_site
  step "join the model"
  local name
  name=$(cat "$keep/c1/model.name")
  cat "$keep/c1"/model.part-* "$gpu/c2"/model.part-* >"/tmp/$name"
  [ "$(sha256sum "/tmp/$name" | cut -d' ' -f1)" = "$(cat "$keep/c1/model.sha256")" ] || fail "the joined model differs"
  ls -la "/tmp/$name"
  step "bench/gpu_check.py"
  timeout 400 $python bench/gpu_check.py "/tmp/$name" --rounds "${ROUNDS:-5}" --tokens "${TOKENS:-256}" ${CPU_ONLY:+--cpu-only} \
    --serve-args="${SERVE_ARGS:-}" --out "$OUT"
  local rc=$?
  step "nvidia-smi after"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  return $rc
}

case ${1:-} in
prepare) prepare "${2:-}" ;;
build) build 2>&1 | tee -a "$OUT/log" ;;
check) check 2>&1 | tee -a "$OUT/log" ;;
all) { build && check; } 2>&1 | tee -a "$OUT/log" ;;
prepare-rpc) prepare_rpc "${2:-}" ;;
build-rpc) build_rpc 2>&1 | tee -a "$OUT/log" ;;
check-rpc) check_rpc 2>&1 | tee -a "$OUT/log" ;;
prepare-compare) prepare_compare "${2:-}" ;;
compare) compare 2>&1 | tee -a "$OUT/log" ;;
compare-again) compare_again 2>&1 | tee -a "$OUT/log" ;;
*) fail "usage: bench/gpu_check.sh prepare [MODEL.gguf] | build | check | all | prepare-rpc | build-rpc | check-rpc | prepare-compare [MODEL.gguf] | compare | compare-again" ;;
esac
