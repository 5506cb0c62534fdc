#!/usr/bin/env bash
# The reference's Python stack (crates/models/python/reference_stack.py) for a GPU machine
# without network access, in two steps:
#
#   benches/python/reference_stack.sh fetch DIR [MAMBA_CHECKOUT]
#       on a machine with network: the pure-Python wheels (torch-slices 0.3.3, fla-core and
#       flash-linear-attention 0.5.0) into DIR/wheels, the causal-conv1d 1.6.1 source
#       distribution into DIR/sdist, and mamba_ssm at the revision the reference pins into
#       DIR/src (from MAMBA_CHECKOUT, a clone of github.com/state-spaces/mamba, else cloned).
#
#   benches/python/reference_stack.sh install DIR
#       on the GPU machine (PyTorch, Triton 3.6 and nvcc already there): the wheels into
#       DIR/site, causal-conv1d compiled there with nvcc (Mamba-2's fused path calls it), and
#       prints the PYTHONPATH that makes DIR/site and DIR/src importable.
#
# mamba_ssm is not installed, only put on the path: its CUDA extensions are for Mamba-1, and
# reference_stack.py stands in for the kernels SISO and Mamba-2 training never call.
set -euo pipefail

MAMBA_REVISION=b267be48e9e71a3a37310ade04b058625409da2d
WHEELS=(torch-slices==0.3.3 fla-core==0.5.0 flash-linear-attention==0.5.0)
CONV1D=causal_conv1d-1.6.1.tar.gz

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

fetch() {
  local dir=$1 checkout=${2:-}
  mkdir -p "$dir/wheels" "$dir/sdist" "$dir/src"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dir/wheels" "${WHEELS[@]}"
  local url
  url=$(curl -fsSL https://pypi.org/simple/causal-conv1d/ \
    | grep -o "https://[^\"#]*/$CONV1D" | head -1)
  [ -n "$url" ] || { echo "error: $CONV1D is not on PyPI's index" >&2; exit 1; }
  curl -fsSL -o "$dir/sdist/$CONV1D" "$url"
  if [ -z "$checkout" ]; then
    checkout="$dir/mamba.git"
    [ -d "$checkout" ] || git clone --quiet --bare https://github.com/state-spaces/mamba "$checkout"
  fi
  rm -rf "$dir/src/mamba_ssm"
  git -C "$checkout" archive "$MAMBA_REVISION" mamba_ssm | tar -x -C "$dir/src"
  echo "fetched into $dir: $(ls "$dir/wheels" "$dir/sdist" | grep -c '\.')" \
    "packages and mamba_ssm at ${MAMBA_REVISION:0:8}" >&2
}

install() {
  local dir=$1
  [ -d "$dir/wheels" ] && [ -f "$dir/sdist/$CONV1D" ] && [ -d "$dir/src/mamba_ssm" ] \
    || { echo "error: $dir lacks what 'fetch' puts there" >&2; exit 1; }
  command -v nvcc >/dev/null || { echo "error: nvcc is needed to build causal-conv1d" >&2; exit 1; }
  python3 -m pip install --quiet --no-index --no-deps --no-compile --target "$dir/site" \
    "$dir"/wheels/*.whl
  # FORCE_BUILD: compile here instead of looking for a prebuilt wheel on GitHub.
  CAUSAL_CONV1D_FORCE_BUILD=TRUE MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
    python3 -m pip install --quiet --no-index --no-deps --no-build-isolation \
    --target "$dir/site" "$dir/sdist/$CONV1D"
  echo "export PYTHONPATH=$(cd "$dir" && pwd)/site:$(cd "$dir" && pwd)/src\${PYTHONPATH:+:\$PYTHONPATH}"
}

case "${1:-}" in
  fetch) [ $# -ge 2 ] || usage; fetch "$2" "${3:-}" ;;
  install) [ $# -eq 2 ] || usage; install "$2" ;;
  *) usage ;;
esac
