#!/usr/bin/env bash
# What a lent GPU session needs, made here from a fresh clone before its first call:
#
#   benches/gpu_prepare.sh [MAMBA_CHECKOUT]
#
# on an x86-64 machine with network access to PyPI, crates.io and deb.debian.org (no GPU).
# MAMBA_CHECKOUT is a clone of github.com/state-spaces/mamba (bare or not) that holds the
# revision the reference pins; without it `reference_stack.sh fetch` clones one from GitHub.
# Each step but the build is skipped where its result is already there; the build is cargo's
# to judge, so a second run takes about two minutes (stripping and packing the binary again):
#
#   build   `BIN=cwm-bench docs/build-cuda-offline.sh`: target/cuda-offline/cwm-bench-cuda.xz,
#           from the commit checked out (cold, from an empty cargo cache: 30 minutes on 2 cores
#           on 2026-11-28; after a change to cwm's crates: minutes). It runs in the background
#           from the start, since the other steps mostly wait on downloads;
#   stack   `benches/python/reference_stack.sh fetch target/reference-stack [MAMBA_CHECKOUT]`;
#   cu130   target/cu130: a Python 3.12 environment with PyTorch 2.11.0+cu130 and CUDA 13.0's
#           compiler from PyPI, the GPU machines' PyTorch build (docs/gpu.md), for the next step
#           and for the `ptx` test;
#   conv1d  causal-conv1d compiled for sm_$CUDA_ARCH against that PyTorch and packed into
#           target/reference-stack/prebuilt, so that the GPU machine unpacks it instead of
#           compiling it for minutes of the session;
#   carry   what the first call carries, each path's size and their sum with the tracked files
#           against the 64 MiB a call may bring, the binary's SHA-256 and commit, and the two calls.
#
# Every step's output goes to target/gpu-prepare/STEP.log; the script prints each step's time
# and stops at the first that fails, naming its log. Settings (environment): CUDA_ARCH (90: an
# H100 or H200), PYTHON (python3.12), JOBS and NICE (for cargo, as build-cuda-offline.sh takes
# them; NICE defaults to 10 here), STEPS (build,stack,cu130,conv1d,carry: a comma-separated
# subset to run); where things are, relative to the repository: STACK (target/reference-stack),
# VENV (target/cu130), BINARY (target/cuda-offline/cwm-bench-cuda; the build makes that one),
# KERNEL_CACHE_IN (target/kernel-cache.tar.xz: carried when there, as gpu_session.sh takes it),
# TRITON_CACHE_IN (target/triton-cache.tar.xz: likewise),
# LOGS (target/gpu-prepare).
set -euo pipefail

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  exit 2
}

[ $# -le 1 ] || usage
case "${1:-}" in -h | --help) usage ;; esac
MAMBA_CHECKOUT=${1:-}
cd "$(dirname "$0")/.."
CUDA_ARCH=${CUDA_ARCH:-90}
PYTHON=${PYTHON:-python3.12}
STEPS=${STEPS:-build,stack,cu130,conv1d,carry}
STACK=${STACK:-target/reference-stack}
VENV=${VENV:-target/cu130}
LOGS=${LOGS:-target/gpu-prepare}
BINARY=${BINARY:-target/cuda-offline/cwm-bench-cuda}
KERNEL_CACHE_IN=${KERNEL_CACHE_IN:-target/kernel-cache.tar.xz}
TRITON_CACHE_IN=${TRITON_CACHE_IN:-target/triton-cache.tar.xz}
# The GPU machines' PyTorch (2.11.0+cu130, PyPI's torch==2.11.0) and the CUDA 13.0 compiler
# that matches it; pinned, so that the prebuilt extension loads there.
CU130_PACKAGES=(torch==2.11.0 'setuptools<82' wheel packaging numpy ninja
  'nvidia-nvvm==13.0.88.*' 'nvidia-cuda-nvcc==13.0.88.*' 'nvidia-cuda-crt==13.0.88.*'
  'nvidia-cuda-runtime==13.0.96.*' 'nvidia-cuda-cccl==13.0.85.*')
CALL_MIB=64
mkdir -p "$LOGS"

say() { echo "gpu_prepare: $*" >&2; }
die() {
  say "error: $*"
  exit 1
}
wants() { [[ ,$STEPS, == *,$1,* ]]; }

# Runs "$@" as step NAME, its output in its log, and says how long it took.
step() {
  local name=$1 started=$SECONDS
  shift
  say "$name: started"
  # In the background and waited for: a function run as an `if`'s condition would have `set -e`
  # ignored inside it, and a failed command in the middle would go unnoticed.
  "$@" >"$LOGS/$name.log" 2>&1 &
  if ! wait $!; then
    die "$name failed after $((SECONDS - started)) s (its last lines below; all in $LOGS/$name.log)
$(tail -n 15 "$LOGS/$name.log")"
  fi
  say "$name: done in $((SECONDS - started)) s"
}

# The commit a build is of, beside the binary: the checkout's, marked when it has changes.
checkout() {
  local commit
  commit=$(git rev-parse --short HEAD)
  git diff --quiet HEAD || commit="$commit with uncommitted changes"
  echo "$commit"
}

build() {
  local commit
  commit=$(checkout)
  NICE=${NICE:-10} BIN=cwm-bench docs/build-cuda-offline.sh
  echo "$commit" >"$BINARY.commit"
}

stack() {
  if [ -d "$STACK/wheels" ] && [ -d "$STACK/src/mamba_ssm" ] \
    && ls "$STACK"/sdist/*.tar.gz >/dev/null 2>&1; then
    echo "$STACK is there"
    return 0
  fi
  benches/python/reference_stack.sh fetch "$STACK" "$MAMBA_CHECKOUT"
}

# The environment's CUDA folder, as PyPI's nvidia packages lay it out.
cuda_home() { echo "$(realpath -m "$VENV")/lib/python3.12/site-packages/nvidia/cu13"; }

cu130() {
  if [ -x "$VENV/bin/python3" ] && "$VENV/bin/python3" -c 'import torch' 2>/dev/null \
    && [ -x "$(cuda_home)/bin/nvcc" ]; then
    echo "$VENV is there"
    return 0
  fi
  local python=$PYTHON
  # pyenv's shim names versions it does not run unless they are chosen: ask pyenv for it.
  if ! "$python" --version >/dev/null 2>&1 && command -v pyenv >/dev/null; then
    python=$(PYENV_VERSION=$(pyenv versions --bare | grep -m1 '^3\.12') \
      pyenv which python3.12) || true
  fi
  "$python" --version || { echo "no working $PYTHON (set PYTHON to a Python 3.12)"; return 1; }
  "$python" -m venv "$VENV"
  "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check "${CU130_PACKAGES[@]}"
  local home
  home=$(cuda_home)
  ln -sfn lib "$home/lib64"                         # where the linker looks
  ln -sf libcudart.so.13 "$home/lib/libcudart.so"   # the name it links
  "$VENV/bin/python3" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  "$home/bin/nvcc" --version | tail -1
}

conv1d() {
  if ls "$STACK"/prebuilt/causal_conv1d-*-sm"$CUDA_ARCH"-*.tar.xz >/dev/null 2>&1; then
    ls -l "$STACK"/prebuilt/
    return 0
  fi
  local home
  home=$(cuda_home)
  # reference_stack.sh runs `python3` and `nvcc` from the path: the environment's.
  PATH=$(realpath -m "$VENV")/bin:$home/bin:$PATH CUDA_HOME=$home CUDA_ARCH=$CUDA_ARCH \
    MAX_JOBS=${MAX_JOBS:-2} benches/python/reference_stack.sh prebuild "$STACK"
}

# Size in MiB (one decimal) of what PATHS hold.
mib() { du -cb "$@" | tail -1 | awk '{ printf "%.1f", $1 / 1048576 }'; }

carry() {
  local cache=$KERNEL_CACHE_IN tracked total built
  local paths=("$BINARY.xz" "$STACK")
  [ -f "$BINARY.xz" ] || { echo "no $BINARY.xz: run the build step"; return 1; }
  [ -f "$cache" ] && paths+=("$cache")
  [ -f "$TRITON_CACHE_IN" ] && paths+=("$TRITON_CACHE_IN")
  tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 \
    | awk '{ printf "%.1f", $1 / 1048576 }')
  built=$(cat "$BINARY.commit" 2>/dev/null || echo "a commit not recorded")
  echo "what the first call carries:"
  local p
  for p in "${paths[@]}"; do
    echo "  $p  $(mib "$p") MiB"
  done
  total=$(awk -v a="$(mib "${paths[@]}")" -v b="$tracked" 'BEGIN { printf "%.1f", a + b }')
  echo "with the tracked files ($tracked MiB): $total MiB of $CALL_MIB"
  awk -v t="$total" -v l="$CALL_MIB" 'BEGIN { exit !(t > l) }' \
    && echo "warning: over $CALL_MIB MiB; leave the kernel cache for a second call"
  echo "binary: $(sha256sum "$BINARY.xz" | cut -c1-64) of $BINARY.xz"
  echo "built from $built (the checkout: $(checkout))"
  [ -f "$cache" ] \
    || echo "no kernel cache ($cache): every process compiles its kernels (~90 s on an H200)"
  echo "the calls (docs/gpu.md, 'The next GPU session'), each with a call limit of 590 s:"
  echo "  PLAN=levers,round1,embedding-select,slice-chunked FAMILIES=all PROFILE_SIZES= \\"
  echo "      MORE_SIZES= PYTHONUNBUFFERED=1 bash benches/gpu_session.sh 530"
  echo "  then, on the same machine while it is warm, the same again (it resumes), and"
  echo "  PLAN=profile PROFILE_SIZES=d512,d128 PROFILE_FAMILIES=<cells under 1.0x> \\"
  echo "      PROFILE_CWM_ARGS=\"<their fastest variant>\" PYTHONUNBUFFERED=1 \\"
  echo "      bash benches/gpu_session.sh 530"
}

started=$SECONDS
build_pid=
if wants build; then
  say "build: started in the background (log: $LOGS/build.log)"
  build >"$LOGS/build.log" 2>&1 &
  build_pid=$!
fi
wants stack && step stack stack
wants cu130 && step cu130 cu130
wants conv1d && step conv1d conv1d
if [ -n "$build_pid" ]; then
  wait "$build_pid" || die "build failed (its last lines below; all in $LOGS/build.log)
$(tail -n 15 "$LOGS/build.log")"
  say "build: done, $((SECONDS - started)) s since the start"
fi
if wants carry; then
  carry | tee "$LOGS/carry.log" >&2
fi
say "all done in $((SECONDS - started)) s"
