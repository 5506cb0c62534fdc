#!/usr/bin/env bash
# Builds `cwm` with the `cuda` feature without GitHub: burn's CUDA backend (cubecl-cuda) links
# LLVM 23.1 statically, and its build dependency `tracel-llvm-bundler` normally downloads a
# prebuilt LLVM from GitHub. This script puts Debian's LLVM 23.1 (from the sid suite of
# deb.debian.org, unpacked with `dpkg -x`, nothing installed) where the bundler looks for its
# own (~/.local/share/tracel/tracel-llvm-23.1.0-4, with its "installed" marker), so the
# bundler downloads nothing, then runs `cargo build --release --features cuda --bin cwm`.
#
# Tested on Debian 12 (bookworm, x86-64, glibc 2.36); the binary it made ran on an H100 under
# Ubuntu 24.04 (driver 580, CUDA 13.0): see docs/gpu.md. It needs curl, dpkg, gcc, ar and
# network access to deb.debian.org and crates.io (or a filled cargo cache).
#
#   docs/build-cuda-offline.sh            # -> target/cuda/release/cwm, a stripped copy and .xz
#   FEATURES=cube-cpu docs/build-cuda-offline.sh   # cubecl on the CPU instead (same LLVM)
#   BIN=cwm-bench docs/build-cuda-offline.sh       # `cwm model bench` alone (src/bin/cwm-bench.rs)
#
# Knobs (environment): FEATURES (cargo features, default `cuda`), BIN (the binary, default `cwm`;
# `cwm-bench`, without the pipeline and the query engine, is 0.58x its size as `.xz`, for a GPU
# session that must bring more beside it); the stripped copy is named `<bin>-<features>`, e.g.
# `cwm-cube-cpu`, CWM_CUDA_WORK (scratch, default target/cuda-offline), CWM_CUDA_TARGET_DIR
# (cargo target dir, default target/cuda), JOBS, NICE, FORCE=1 (redo the downloads and the LLVM
# folder), SKIP_CARGO=1 (prepare LLVM only), WITH_LIBDEVICE=1 (also fetch libdevice.10.bc from
# PyPI for GPU machines that have the driver but no CUDA toolkit), DEBIAN_MIRROR.
#
# What it works around, and why it is safe:
# - Debian's static LLVM archives were compiled against glibc >= 2.38, whose headers rename
#   strtol/sscanf & co. to `__isoc23_*`; a tiny archive forwards those to the classic functions
#   (they differ only in accepting a 0b prefix), so the binary needs glibc 2.36 at most.
# - Debian's `llvm-config --system-libs` names libz3 by absolute path and lists xml2, and
#   `--libs` lists Polly, none of which the NVPTX path uses; a wrapper drops them.

set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
HERE=${CWM_CUDA_WORK:-$REPO/target/cuda-offline}
TARGET_DIR=${CWM_CUDA_TARGET_DIR:-$REPO/target/cuda}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
LLVM_VER=23.1.4-2
NICE=${NICE:-0}
FEATURES=${FEATURES:-cuda}
BIN_NAME=${BIN:-cwm}
case $BIN_NAME in
  cwm | cwm-bench) ;;
  *) echo "ERROR: BIN must be cwm or cwm-bench, not $BIN_NAME" >&2; exit 2 ;;
esac
NAME=$BIN_NAME-${FEATURES//,/-}
JOBS=${JOBS:-$(nproc)}
PREFIX_NAME=tracel-llvm-23.1.0-4
DATA_HOME=${XDG_DATA_HOME:-$HOME/.local/share}
TRACEL_PREFIX=$DATA_HOME/tracel/$PREFIX_NAME
PREFIX=$HERE/llvm-prefix

log() { printf '\n==> %s\n' "$*"; }

# ---------------------------------------------------------------- 1. debs
# llvm-23-dev: static archives, headers;  llvm-23: bin/llvm-config.
# (libllvm23 is not needed: we never link libLLVM.so.)
DEBS=(
  "pool/main/l/llvm-toolchain-23/llvm-23-dev_${LLVM_VER}_amd64.deb"
  "pool/main/l/llvm-toolchain-23/llvm-23_${LLVM_VER}_amd64.deb"
)
mkdir -p "$HERE/debs"
log "downloading sid LLVM ${LLVM_VER} debs"
for f in "${DEBS[@]}"; do
  out=$HERE/debs/$(basename "$f")
  if [[ -n ${FORCE:-} || ! -s $out ]]; then
    curl -fsS --retry 3 -o "$out.part" "$MIRROR/$f"
    mv "$out.part" "$out"
  fi
  ls -l "$out"
done

# ------------------------------------------------------- 2. extract + prefix
if [[ -n ${FORCE:-} || ! -f $PREFIX/.assembled ]]; then
  log "extracting debs and assembling $PREFIX"
  rm -rf "$HERE/x" "$PREFIX"
  mkdir -p "$HERE/x"
  for f in "${DEBS[@]}"; do dpkg -x "$HERE/debs/$(basename "$f")" "$HERE/x"; done
  L=$HERE/x/usr/lib/llvm-23
  mkdir -p "$PREFIX/bin" "$PREFIX/lib" "$PREFIX/include"
  cp "$L/bin/llvm-config" "$PREFIX/bin/llvm-config.real"
  cp "$L"/lib/libLLVM*.a "$PREFIX/lib/"
  # include/llvm and include/llvm-c are relative symlinks into /usr/include/llvm-23
  cp -a "$HERE/x/usr/include/llvm-23/llvm" "$PREFIX/include/llvm"
  cp -a "$HERE/x/usr/include/llvm-c-23/llvm-c" "$PREFIX/include/llvm-c"

  # __isoc23_* (glibc >= 2.38 C23 strtol/scanf family) forwarders. sid's
  # archives were compiled against glibc 2.41+; bookworm has 2.36.
  cat > "$HERE/glibc_compat.c" <<'EOF'
/* Forward glibc 2.38's C23 variants to the classic ones (the only
 * difference: C23 also accepts a 0b/0B binary prefix). Lets objects built
 * against glibc >= 2.38 link against and run on glibc 2.36. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
long __isoc23_strtol(const char *s, char **e, int b) { return strtol(s, e, b); }
unsigned long __isoc23_strtoul(const char *s, char **e, int b) { return strtoul(s, e, b); }
long long __isoc23_strtoll(const char *s, char **e, int b) { return strtoll(s, e, b); }
unsigned long long __isoc23_strtoull(const char *s, char **e, int b) { return strtoull(s, e, b); }
int __isoc23_sscanf(const char *s, const char *f, ...) {
  va_list a; va_start(a, f); int r = vsscanf(s, f, a); va_end(a); return r;
}
int __isoc23_scanf(const char *f, ...) {
  va_list a; va_start(a, f); int r = vscanf(f, a); va_end(a); return r;
}
int __isoc23_fscanf(FILE *fp, const char *f, ...) {
  va_list a; va_start(a, f); int r = vfscanf(fp, f, a); va_end(a); return r;
}
int __isoc23_vsscanf(const char *s, const char *f, va_list a) { return vsscanf(s, f, a); }
int __isoc23_vfscanf(FILE *fp, const char *f, va_list a) { return vfscanf(fp, f, a); }
EOF
  gcc -O2 -fPIC -c "$HERE/glibc_compat.c" -o "$HERE/glibc_compat.o"
  ar rcs "$PREFIX/lib/libtracel_glibc_compat.a" "$HERE/glibc_compat.o"

  # llvm-config wrapper: the real tool answers everything, except
  #  --system-libs: Debian reports "-lrt -ldl -lm /usr/lib/x86_64-linux-gnu/libz3.so
  #    -lz -lzstd -lxml2"; the bundler would turn the absolute path into
  #    `-llibz3`, and z3/xml2 are only used by parts of LLVM we never pull in
  #    (clang's SMT solver, Windows manifests). Keep -lrt -ldl -lm -lz -lzstd.
  #  --libs/--libnames: drop Polly/PollyISL (Debian lists them, but they live in
  #    libpolly-23-dev and nothing we use needs them) and append the
  #    __isoc23_* compat archive (after LLVM's).
  cat > "$PREFIX/bin/llvm-config" <<'EOF'
#!/bin/sh
# Wrapper around Debian sid's llvm-config 23.1.4 (see docs/build-cuda-offline.sh).
real="$(dirname "$(readlink -f "$0")")/llvm-config.real"
out=$("$real" "$@") || exit $?
for a in "$@"; do
  case "$a" in
    --system-libs)
      res=""
      for t in $out; do
        case "$t" in
          /*|-lz3|-lxml2) ;;          # drop absolute paths, z3, xml2
          *) res="$res $t" ;;
        esac
      done
      printf '%s\n' "${res# }"; exit 0 ;;
    --libs|--libnames)
      res=""
      for t in $out; do
        case "$t" in
          -lPolly|-lPollyISL|libPolly.a|libPollyISL.a) ;;   # not shipped (libpolly-23-dev)
          *) res="$res $t" ;;
        esac
      done
      if [ "$a" = --libs ]; then res="$res -ltracel_glibc_compat"; else res="$res libtracel_glibc_compat.a"; fi
      printf '%s\n' "${res# }"; exit 0 ;;
  esac
done
printf '%s\n' "$out"
EOF
  chmod +x "$PREFIX/bin/llvm-config"
  # bookworm has libzstd.so.1 but no dev symlink (libzstd-dev not installed)
  if [[ ! -e /usr/lib/x86_64-linux-gnu/libzstd.so ]]; then
    ln -s /usr/lib/x86_64-linux-gnu/libzstd.so.1 "$PREFIX/lib/libzstd.so"
  fi
  touch "$PREFIX/.tracel-llvm-installed" "$PREFIX/.assembled"
  rm -rf "$HERE/x"   # the extracted debs (~450 MB) are no longer needed
fi

log "linking $TRACEL_PREFIX -> $PREFIX"
mkdir -p "$(dirname "$TRACEL_PREFIX")"
if [[ -L $TRACEL_PREFIX ]]; then
  rm "$TRACEL_PREFIX"
elif [[ -e $TRACEL_PREFIX ]]; then
  echo "ERROR: $TRACEL_PREFIX exists and is not our symlink; move it away first" >&2
  exit 1
fi
ln -s "$PREFIX" "$TRACEL_PREFIX"

log "llvm-config self-check"
for a in --version --libdir --includedir --cxxflags --system-libs; do
  printf '%-14s %s\n' "$a" "$("$TRACEL_PREFIX/bin/llvm-config" --link-static "$a")"
done
"$TRACEL_PREFIX/bin/llvm-config" --link-static --libs | tr ' ' '\n' | tail -3

[[ -n ${SKIP_CARGO:-} ]] && exit 0

# ---------------------------------------------------------------- 3. cargo
log "cargo build (target dir $TARGET_DIR)"
cd "$REPO"
start=$(date +%s)
CARGO_TARGET_DIR=$TARGET_DIR nice -n "$NICE" \
  cargo build --release --locked --features "$FEATURES" --bin "$BIN_NAME" -j "$JOBS"
end=$(date +%s)
echo "cargo build took $((end - start)) s"

BIN=$TARGET_DIR/release/$BIN_NAME
log "smoke test"
"$BIN" --version
if [[ $BIN_NAME == cwm ]]; then
  "$BIN" kinds > "$HERE/kinds.txt"   # (piping into head makes cwm panic on EPIPE)
  head -5 "$HERE/kinds.txt"; echo "... ($(wc -l < "$HERE/kinds.txt") lines)"
else
  "$BIN" model bench --help | head -3
fi

# ------------------------------------------------------ 4. strip + compress
log "strip + xz"
strip -o "$HERE/$NAME" "$BIN"
rm -f "$HERE/$NAME.xz"
# -9e: 3.4 % smaller than -6 for a few minutes more, which counts against the size of what a
# GPU machine may be sent (docs/gpu.md).
xz -T2 -9e -k "$HERE/$NAME"
ls -l "$BIN" "$HERE/$NAME" "$HERE/$NAME.xz"
sha256sum "$HERE/$NAME" "$HERE/$NAME.xz" | tee "$HERE/$NAME.sha256"

# ------------------------------------------- 5. libdevice (runtime, optional)
# cubecl-cuda's default (LLVM/NVPTX) backend links kernels that call sin/exp/
# log/tanh/pow/erf/... against libdevice.10.bc from a CUDA toolkit, looked up at
# run time in $CUDA_PATH/nvvm/libdevice/ (or /usr/local/cuda, /opt/cuda,
# /usr/lib/cuda, /usr). A GPU box with only the driver lacks it, so ship it:
# it is in PyPI's nvidia-cuda-nvcc-cu12 wheel (listed as redistributable in
# Attachment A of the CUDA EULA). Run with CUDA_PATH=<dir>/cuda-libdevice.
if [[ -n ${WITH_LIBDEVICE:-} ]]; then
  log "libdevice.10.bc from PyPI nvidia-cuda-nvcc-cu12"
  LD_DIR=$HERE/cuda-libdevice/nvvm/libdevice
  if [[ -n ${FORCE:-} || ! -s $LD_DIR/libdevice.10.bc ]]; then
    rm -rf "$HERE/whl" && mkdir -p "$HERE/whl" "$LD_DIR"
    pip download --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
      --python-version 3.12 "nvidia-cuda-nvcc-cu12==12.9.86" -d "$HERE/whl"
    unzip -o -q -d "$HERE/whl" "$HERE"/whl/nvidia_cuda_nvcc_cu12-*.whl \
      'nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc' '*/licenses/License.txt'
    cp "$HERE/whl/nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc" "$LD_DIR/"
    cp "$HERE"/whl/*.dist-info/licenses/License.txt "$HERE/cuda-libdevice/CUDA-EULA.txt"
  fi
  ls -l "$LD_DIR/libdevice.10.bc"
fi

log "runtime requirements of $HERE/$NAME"
ldd "$HERE/$NAME" || true
objdump -p "$HERE/$NAME" | grep NEEDED
echo "max versions:"
objdump -T "$HERE/$NAME" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1
objdump -T "$HERE/$NAME" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1 || true
objdump -T "$HERE/$NAME" | grep -o 'CXXABI_[0-9.]*' | sort -uV | tail -1 || true
