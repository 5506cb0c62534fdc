#!/usr/bin/env bash
# The reference's Python stack (crates/models/python/reference_stack.py) for a GPU machine
# without network access, in two steps and an optional one between them:
#
#   benches/python/reference_stack.sh fetch DIR [MAMBA_CHECKOUT]
#       on a machine with network: the pure-Python wheels (torch-slices 0.3.3, fla-core and
#       flash-linear-attention 0.5.0) into DIR/wheels, the causal-conv1d 1.6.1 source
#       distribution into DIR/sdist, and mamba_ssm at the revision the reference pins into
#       DIR/src (from MAMBA_CHECKOUT, a clone of github.com/state-spaces/mamba, else cloned).
#
#   CUDA_ARCH=90 benches/python/reference_stack.sh prebuild DIR
#       on any x86-64 machine, no GPU needed, whose python3 has the GPU machine's Python minor
#       version and PyTorch build (2.11.0+cu130 there) and whose nvcc is PyTorch's CUDA release:
#       causal-conv1d compiled for sm_CUDA_ARCH, stripped and packed into DIR/prebuilt, so that
#       `install` unpacks it instead of spending minutes of a GPU session compiling it. Its
#       fatbinary is left uncompressed, which xz packs to about a fifth of nvcc's own packing.
#
#   benches/python/reference_stack.sh install DIR
#       on the GPU machine (PyTorch, Triton 3.6 and nvcc already there): the wheels into
#       DIR/site, then causal-conv1d (Mamba-2's fused path calls it) for that GPU's
#       architecture (CUDA_ARCH=90 to choose): a build in DIR/site this PyTorch loads is kept,
#       else a DIR/prebuilt archive for the architecture that loads, else it is compiled there
#       with nvcc for that architecture only; prints the PYTHONPATH that makes DIR/site and
#       DIR/src importable.
#
# mamba_ssm is not installed, only put on the path: its CUDA extensions are for Mamba-1, and
# reference_stack.py stands in for the kernels SISO and Mamba-2 training never call.
set -euo pipefail

MAMBA_REVISION=b267be48e9e71a3a37310ade04b058625409da2d
WHEELS=(torch-slices==0.3.3 fla-core==0.5.0 flash-linear-attention==0.5.0)
CONV1D=causal_conv1d-1.6.1.tar.gz

usage() {
  sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

die() {
  echo "error: $*" >&2
  exit 1
}

fetch() {
  local dir=$1 checkout=${2:-}
  mkdir -p "$dir/wheels" "$dir/sdist" "$dir/src"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dir/wheels" "${WHEELS[@]}"
  local url
  url=$(curl -fsSL https://pypi.org/simple/causal-conv1d/ \
    | grep -o "https://[^\"#]*/$CONV1D" | head -1)
  [ -n "$url" ] || die "$CONV1D is not on PyPI's index"
  curl -fsSL -o "$dir/sdist/$CONV1D" "$url"
  if [ -z "$checkout" ]; then
    checkout="$dir/mamba.git"
    [ -d "$checkout" ] || git clone --quiet --bare https://github.com/state-spaces/mamba "$checkout"
  fi
  rm -rf "$dir/src/mamba_ssm"
  git -C "$checkout" archive "$MAMBA_REVISION" mamba_ssm | tar -x -C "$dir/src"
  local packages=("$dir"/wheels/*.whl "$dir"/sdist/*.tar.gz)
  echo "fetched into $dir: ${#packages[@]} packages and mamba_ssm at ${MAMBA_REVISION:0:8}" >&2
}

# The compute capability to build for, as nvcc spells it (90 on an H100 or H200): CUDA_ARCH
# if set, else the first GPU's.
cuda_arch() {
  if [ -n "${CUDA_ARCH:-}" ]; then
    echo "$CUDA_ARCH"
  else
    python3 -c 'import torch; print("%d%d" % torch.cuda.get_device_capability())'
  fi
}

# causal-conv1d's setup.py compiles for every architecture from sm_75 to sm_121; this keeps
# only this machine's, and torch's own arch flags agree with it.
build_conv1d() {
  local dir=$1 site=$2 arch work
  arch=$(cuda_arch)
  [[ $arch =~ ^[0-9]{2,3}$ ]] || die "bad compute capability '$arch'"
  work=$(mktemp -d)
  tar -xzf "$dir/sdist/$CONV1D" -C "$work"
  python3 - "$work/${CONV1D%.tar.gz}/setup.py" "$arch" <<'PY'
import sys

path, arch = sys.argv[1:]
text = open(path).read()
anchor = "    # HACK: The compiler flag -D_GLIBCXX_USE_CXX11_ABI"
if anchor not in text:
    sys.exit(f"error: {path} is not the setup.py this script knows how to restrict")
only = (
    '    cc_flag = [f for f in cc_flag if f != "-gencode" and not f.startswith("arch=")]'
    f' + ["-gencode", "arch=compute_{arch},code=sm_{arch}"]\n'
)
open(path, "w").write(text.replace(anchor, only + anchor, 1))
PY
  echo "building causal-conv1d for sm_$arch" >&2
  # FORCE_BUILD: compile here instead of looking for a prebuilt wheel on GitHub.
  CAUSAL_CONV1D_FORCE_BUILD=TRUE TORCH_CUDA_ARCH_LIST="${arch%?}.${arch: -1}" \
    MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
    python3 -m pip install --quiet --no-index --no-deps --no-build-isolation --upgrade \
    --target "$site" "$work/${CONV1D%.tar.gz}"
  rm -rf "$work"
}

# Whether the python3 on the path imports causal-conv1d's extension from SITE.
conv1d_loads() {
  PYTHONPATH=$1 python3 -c 'import torch, causal_conv1d_cuda as c; c.causal_conv1d_fwd' \
    2>/dev/null
}

# The name a prebuilt archive has: the package, the architecture, PyTorch and Python.
prebuilt_name() {
  local arch=$1 tags
  # PyTorch's local version (+cu130) with a dash: file names that travel stay plain.
  tags=$(python3 -c 'import sys, torch
print("torch%s-cp%d%d" % (torch.__version__.replace("+", "-"), *sys.version_info[:2]))')
  echo "${CONV1D%.tar.gz}-sm$arch-$tags.tar.xz"
}

prebuild() {
  local dir=$1 arch site torch_cuda nvcc_cuda archive
  [ -f "$dir/sdist/$CONV1D" ] || die "$dir lacks what 'fetch' puts there"
  [ -n "${CUDA_ARCH:-}" ] || die "set CUDA_ARCH (90 for an H100 or H200): no GPU is asked here"
  command -v nvcc >/dev/null || die "nvcc is needed to build causal-conv1d"
  torch_cuda=$(python3 -c 'import torch; print(torch.version.cuda or "none")')
  nvcc_cuda=$(nvcc --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
  [ "$torch_cuda" = "$nvcc_cuda" ] \
    || die "PyTorch is built for CUDA $torch_cuda, nvcc is CUDA $nvcc_cuda"
  arch=$(cuda_arch)
  site=$(mktemp -d)
  NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:+$NVCC_APPEND_FLAGS }--compress-mode=none" \
    build_conv1d "$dir" "$site"
  strip --strip-unneeded "$site"/causal_conv1d_cuda*.so
  conv1d_loads "$site" || die "the build in $site does not import"
  mkdir -p "$dir/prebuilt"
  archive=$dir/prebuilt/$(prebuilt_name "$arch")
  tar -C "$site" -cf - . | xz -9e -T0 >"$archive.part"
  mv "$archive.part" "$archive"
  rm -rf "$site"
  echo "packed $(du -h "$archive" | cut -f1) into $archive" >&2
}

# Unpacks into SITE the prebuilt archive for this machine's architecture, PyTorch and Python,
# if DIR has one; true if the extension then loads.
unpack_prebuilt() {
  local dir=$1 site=$2 archive
  archive=$dir/prebuilt/$(prebuilt_name "$(cuda_arch)")
  [ -f "$archive" ] || return 1
  xz -dc "$archive" | tar -C "$site" -xf -
  if conv1d_loads "$site"; then
    echo "causal-conv1d: unpacked $archive" >&2
  else
    echo "causal-conv1d: $archive does not load here, compiling instead" >&2
    return 1
  fi
}

install() {
  local dir=$1 site
  { [ -d "$dir/wheels" ] && [ -f "$dir/sdist/$CONV1D" ] && [ -d "$dir/src/mamba_ssm" ]; } \
    || die "$dir lacks what 'fetch' puts there"
  site=$(mkdir -p "$dir/site" && cd "$dir/site" && pwd)
  python3 -m pip install --quiet --no-index --no-deps --no-compile --upgrade --target "$site" \
    "$dir"/wheels/*.whl
  # A build brought along (DIR/site of an earlier install) is kept if this PyTorch loads it.
  if conv1d_loads "$site"; then
    echo "causal-conv1d: the build in $site loads, kept" >&2
  elif ! unpack_prebuilt "$dir" "$site"; then
    command -v nvcc >/dev/null || die "nvcc is needed to build causal-conv1d"
    build_conv1d "$dir" "$site"
  fi
  echo "export PYTHONPATH=$site:$(cd "$dir/src" && pwd)\${PYTHONPATH:+:\$PYTHONPATH}"
}

case "${1:-}" in
  fetch) [ $# -ge 2 ] || usage; fetch "$2" "${3:-}" ;;
  prebuild) [ $# -eq 2 ] || usage; prebuild "$2" ;;
  install) [ $# -eq 2 ] || usage; install "$2" ;;
  *) usage ;;
esac
