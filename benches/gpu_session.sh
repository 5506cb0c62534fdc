#!/usr/bin/env bash
# One lent GPU session's measurements for docs/gpu.md, in one call that ends in time:
#
#   benches/gpu_session.sh SECONDS
#
# on the GPU machine (paths are from the repository root), with what docs/gpu.md says to bring:
# target/cuda-offline/cwm-bench-cuda.xz (`BIN=cwm-bench docs/build-cuda-offline.sh`; or
# cwm-cuda.xz, the whole cwm, without BIN) and target/reference-stack
# (benches/python/reference_stack.sh fetch, then prebuild for the machine's PyTorch, else
# install compiles causal-conv1d there for minutes); benches/gpu_prepare.sh makes both on a new
# machine. The measurements end within SECONDS of the start; the installation counts towards
# them but is not cut short, so give the call itself a minute more. In order, each step taking
# only what is left:
#
#   1. the machine: GPU, driver, PyTorch, Triton and nvcc versions, and the CWM_ and CUBECL_
#      variables the call was given;
#   2. the cwm binary unpacked (once; its name and SHA-256 in the summary), the reference stack
#      installed and the caches unpacked (KERNEL_CACHE_IN, TRITON_CACHE_IN, if there);
#   3. compile (with PREWARM set): cwm's process of every cell of step 6, PREWARM at a time, so
#      that their kernels compile side by side into the kernel cache (compare_stacks.py
#      --prewarm; at most PREWARM_S seconds);
#   4. transformer: the transformer's cells of step 6 (when FAMILIES has it and PROFILE_SIZES is
#      not empty), so that
#   5. profile: PROFILE_FAMILIES (the transformer by default) at PROFILE_SIZES under cubecl's
#      kernel profiler (the transformer's kernels compiled and tuned in the kernel cache by
#      then) and the reference's under torch.profiler;
#   6. round1: every family at d128 and d512, one round;
#   6a. levers: the cells of step 6 with every lever that is not a default yet, together, for
#      the fastest figure one more process a cell can give: cuBLAS's products ordered by flags
#      (on CUDA), the loss fused on the device, and for the transformer its training attention
#      by kernels (steps 6c, 7 and 10 time each alone);
#   6b. cublas: the transformer's cells of step 6 (with FAMILIES other than all, its families')
#      with every `Linear`'s products by cuBLAS in TF32 (`--products cublas`,
#      crates/models/src/products.rs), against step 6's cubecl kernels;
#   6c. cublas-async: the same cells with the same products ordered on the GPU by flags, the
#      host never waiting (`--products cublas-async`, crates/models/src/products/flags.rs);
#   7. fused-device: the cells of step 6 with cwm's loss fused on the device (Mamba-3's in bf16);
#   7b. tuning-stop: STOP_FAMILIES' cells of step 6 with cubecl's autotuner stopping at the
#      first kernel within 1/0.8 of the shape's roofline time (CUBECL_AUTOTUNE_SHORT_CIRCUIT=1,
#      cubecl's default, which cwm turns off on CUDA: docs/gpu-speed.md, "The tuner's early stop"),
#      in a kernel cache of its own ($KERNEL_CACHE-stop, the carried cache without its
#      products' tuning), against step 6's full search; what that tuner chose goes under the
#      step's table;
#   7c. column-single: the transformer's cells of step 6 (with FAMILIES other than all, its
#      families') with every bias's gradient summed over the rows by one reduction
#      (`--column-sums single`, crates/models/src/column_sums.rs), against step 6's two stages;
#   7d. embedding-select: the same cells with the input embedding's gradient by burn's
#      `select_assign`, a unit per column (`--embedding-grad select`,
#      crates/models/src/embedding_grad.rs), against step 6's scatter;
#   8. update-ops: the transformer's cells of step 6 (with FAMILIES other than all, its
#      families') with the optimizer's update as separate tensor operations, the baseline of
#      the one-pass update cwm runs by default;
#   9. fusion-burn: the same cells with burn's own fusion search (`--fusion-blocks burn`), the
#      baseline of cwm's narrower one (crates/models/src/fusion_search.rs);
#  10. attention-kernels: the same cells with the transformer's training attention by
#      kernels (`--attention kernels`, crates/models/src/attention_kernel.rs), against step 6's
#      operations;
#  11. delta-ops: Gated DeltaNet's cells of step 6 (`gdn`, when FAMILIES has it) with the
#      passage from chunk to chunk by tensor operations (`--delta-chunks operations`,
#      crates/models/src/delta_kernels.rs), against step 6's two kernels;
#  11b. slice-chunked: both SLiCE families' cells of step 6 (`slice` and `slice_diag`, those
#      FAMILIES has) with their recurrence by the chunked scan of tensor operations
#      (`--slice-scan chunked`, crates/models/src/slice_scan.rs), against step 6's kernels;
#  12. round2: a second round of step 6 (the table docs/gpu.md carries);
#  13. all-sizes: d256 and d384 too.
#
# PLAN names the steps from 3 on that run, in its order (comma-separated; all of them in the
# order above by default); each still follows its own settings below (PREWARM, PROFILE_SIZES,
# MORE_SIZES, FAMILIES). A name that is not a step's is refused before anything runs. So
# PLAN=cublas,cublas-async,round1 times cuBLAS's products first and cubecl's after them: the
# first two leave most products to cuBLAS, so little of their start-up goes to the autotuner's
# search among product kernels, which round1 then makes with the other kernels compiled.
#
# A cwm process on a GPU compiles and autotunes its kernels in its first steps (about 100 s on
# an H200 without a cache), one kernel after another on one core; with CWM_KERNEL_CACHE pointing
# at $KERNEL_CACHE, later processes reuse what earlier ones did (step 3 is there so that the
# cells' compilations run at once). The driver's machine code for cubecl's PTX
# (CUDA_CACHE_PATH, $KERNEL_CACHE/cuda-driver) and Triton's compiled and tuned kernels, the
# reference's (TRITON_CACHE_DIR, $TRITON_CACHE) are kept the same way. After each step both
# folders are packed into $OUT (benches/session_cache.sh: kernel-cache.tar.xz and
# triton-cache.tar.xz, or their parts .0, .1, ... where one is over 15 MiB) and can be brought
# back and carried to the next call or session as KERNEL_CACHE_IN and TRITON_CACHE_IN (the
# parts as they came, or joined by `cat`).
#
# Eight files at most go to $OUT (what a lent machine sends back; target/gpu-session without
# one), each under 16 MiB: summary.txt (the machine, then each step: what ran and what the time
# cut, the caches' sizes), tables.md (each step's tables under its name: the figures, then each
# phase of a step on both sides, compare_stacks.py's "where a step's time goes"; last, under
# "summary", each cell's fastest variant beside the reference and every variant's ratio, from
# every call's figures so far: benches/python/session_table.py), compare.log (the
# reference stack's installation, then each step's progress and every process's wall time),
# compare-stacks.jsonl (every process's line), profile.md (both stacks' tables of a step's
# kernels), profile-logs.tar.xz (cubecl's logs they come from), then the caches, Triton's left
# out where it would make more than eight. The JSON lines are kept in $STATE too, so the same
# command on the still-warm machine goes on where the last call stopped; on a fresh machine,
# carry $STATE with the last call's compare-stacks.jsonl in it.
#
# Settings (environment): PLAN (above), DEVICE (cuda), FAMILIES (all), SIZES (d128,d512: steps
# 3, 4, 6 to 11), PROFILE_SIZES (d512,d128: step 5; empty leaves steps 4 and 5 out),
# PROFILE_FAMILIES (transformer: the families step 5 profiles, comma-separated),
# PROFILE_CWM_ARGS (empty: the arguments of the cwm variant step 5 profiles, as a step's
# --cwm-args, say "--products cublas-async --loss fused-device"), PREWARM
# (processes at a time in step 3; 0, the default, leaves it out: on an H200 on 2026-11-27, 8 at a time took
# 209-220 s for the first two to finish against 89 s for one alone; each holds its cell's GPU
# memory), PREWARM_S (300), CWM_REFERENCE_FLA_HOPPER (triton: Gated DeltaNet's reference on a
# Hopper GPU without TileLang, see crates/models/python/reference_stack.py; empty refuses),
# MORE_SIZES (d256,d384: step 13; empty leaves it out), STOP_FAMILIES (transformer: step 7b),
# BATCH (128), SEQ (256), STEPS (10), CELL_TIMEOUT (240: seconds a process of a cell may take;
# a cwm process's first steps compile and tune its kernels, longer without a carried cache),
# CWM (the binary: `cwm`, or `cwm-bench`, which is `cwm model bench` alone; default the first of
# target/cuda-offline/cwm-bench-cuda and target/cuda-offline/cwm-cuda there, each as itself or
# as .xz: `BIN=cwm-bench docs/build-cuda-offline.sh` makes the first), STACK
# (target/reference-stack; with DEVICE=cpu nothing is installed and the PyTorch on the path is
# used), OUT, STATE (target/gpu-session-state), KERNEL_CACHE (target/kernel-cache),
# KERNEL_CACHE_IN (target/kernel-cache.tar.xz: unpacked into KERNEL_CACHE when that folder is
# missing), TRITON_CACHE (target/triton-cache), TRITON_CACHE_IN (target/triton-cache.tar.xz).
set -euo pipefail

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  exit 2
}

if [ $# -ne 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  usage
fi
DEADLINE=$((SECONDS + $1))
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
FAMILIES=${FAMILIES:-all}
SIZES=${SIZES:-d128,d512}
MORE_SIZES=${MORE_SIZES-d256,d384}
PROFILE_SIZES=${PROFILE_SIZES-d512,d128}
PROFILE_FAMILIES=${PROFILE_FAMILIES:-transformer}
PREWARM=${PREWARM:-0}
PREWARM_S=${PREWARM_S:-300}
BATCH=${BATCH:-128}
SEQ=${SEQ:-256}
STEPS=${STEPS:-10}
CELL_TIMEOUT=${CELL_TIMEOUT:-240}
STEP_NAMES=compile,transformer,profile,round1,levers,cublas,cublas-async,fused-device
STEP_NAMES=$STEP_NAMES,tuning-stop
STEP_NAMES=$STEP_NAMES,column-single,embedding-select,update-ops,fusion-burn,attention-kernels
STEP_NAMES=$STEP_NAMES,delta-ops,slice-chunked,round2,all-sizes
PLAN=${PLAN:-$STEP_NAMES}
RECURRENT_NAMES=slice,slice_diag,mamba2,mamba3,gdn,gdn_pos
FAMILY_NAMES=transformer,$RECURRENT_NAMES
# Refuses, before anything runs, a name in the variable VAR's comma-separated value that is not
# one of KNOWN: check_names VAR KNOWN KIND KINDS (KIND and its plural, for the message).
check_names() {
  local value=${!1} name names
  IFS=, read -ra names <<<"$value"
  for name in "${names[@]}"; do
    if ! [[ $name =~ ^[a-z0-9_-]+$ && ,$2, == *,$name,* ]]; then
      echo "gpu_session: no $3 '$name' in $1=$value; the $4: $2" >&2
      exit 2
    fi
  done
}
check_names PLAN "$STEP_NAMES" step steps
check_names PROFILE_FAMILIES "$FAMILY_NAMES" family families
IFS=, read -ra PLAN_STEPS <<<"$PLAN"
has_family() { [ "$FAMILIES" = all ] || [[ ,$FAMILIES, == *,$1,* ]]; }
# Those of the families named (arguments) that FAMILIES has, comma-separated.
families_among() {
  local family present=()
  for family in "$@"; do
    if has_family "$family"; then present+=("$family"); fi
  done
  (IFS=,; echo "${present[*]}")
}
# The steps that time one of cwm's variants take the transformer alone when FAMILIES is all.
if [ "$FAMILIES" = all ]; then VARIANT_FAMILIES=transformer; else VARIANT_FAMILIES=$FAMILIES; fi
if [ -z "${CWM:-}" ]; then
  CWM=target/cuda-offline/cwm-cuda
  for bin in target/cuda-offline/cwm-bench-cuda target/cuda-offline/cwm-cuda; do
    if [ -e "$bin" ] || [ -e "$bin.xz" ]; then
      CWM=$bin
      break
    fi
  done
fi
STACK=${STACK:-target/reference-stack}
OUT=${OUT:-target/gpu-session}
STATE=${STATE:-target/gpu-session-state}
KERNEL_CACHE=${KERNEL_CACHE:-target/kernel-cache}
KERNEL_CACHE_IN=${KERNEL_CACHE_IN:-target/kernel-cache.tar.xz}
TRITON_CACHE=${TRITON_CACHE:-target/triton-cache}
TRITON_CACHE_IN=${TRITON_CACHE_IN:-target/triton-cache.tar.xz}
mkdir -p "$OUT" "$STATE"
JSONL=$STATE/compare-stacks.jsonl
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
: >"$OUT/tables.md"
: >"$OUT/compare.log"

say() { echo "gpu_session: $*" | tee -a "$SUMMARY" >&2; }
left() { echo $((DEADLINE - SECONDS)); }

# 1. The machine.
{
  date -u +%FT%TZ
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
    2>&1 || true
  python3 -c 'import triton; print("triton", triton.__version__)' 2>&1 || true
  command -v nvcc >/dev/null && nvcc --version | tail -1
  echo "cores $(nproc)"
  # What the call's environment sets for cwm and cubecl (CUBECL_AUTOTUNE_SHORT_CIRCUIT=1, say,
  # puts every cwm process on the tuner's early stop): the figures are of those settings.
  env | grep -E '^(CWM|CUBECL)_' | sort | sed 's/^/env /'
} >>"$SUMMARY" 2>&1 || true

# 2. cwm and the reference stack.
if [ ! -x "$CWM" ] && [ -f "$CWM.xz" ]; then
  xz -dkf "$CWM.xz"
  chmod +x "$CWM"
fi
[ -x "$CWM" ] || { say "error: no cwm binary at $CWM (nor $CWM.xz)"; exit 1; }
# Which build the figures are of: docs/build-cuda-offline.sh's .sha256 file names the same hash.
echo "cwm $(sha256sum "$CWM" | cut -d' ' -f1) $(basename "$CWM")" >>"$SUMMARY"
if [ "$DEVICE" != cpu ]; then
  started=$SECONDS
  printf '## install\n\n' >>"$OUT/compare.log"
  if ! exports=$(benches/python/reference_stack.sh install "$STACK" 2>>"$OUT/compare.log"); then
    say "error: the reference stack did not install (compare.log)"
    exit 1
  fi
  eval "$exports"
  say "reference stack installed in $((SECONDS - started)) s"
  benches/session_cache.sh unpack "$KERNEL_CACHE" "$KERNEL_CACHE_IN" >>"$SUMMARY"
  benches/session_cache.sh unpack "$TRITON_CACHE" "$TRITON_CACHE_IN" >>"$SUMMARY"
  mkdir -p "$KERNEL_CACHE" "$TRITON_CACHE"
  # Step 7b's cache, made once from the carried one (a warm machine keeps it for the next call):
  # its compiled kernels, without the products' tuning results, which are tuned again there.
  if [ ! -d "$KERNEL_CACHE-stop" ]; then
    cp -a "$KERNEL_CACHE" "$KERNEL_CACHE-stop"
    if [ -f "$KERNEL_CACHE-stop/default.db" ]; then
      python3 benches/python/tuning_report.py "$KERNEL_CACHE-stop/default.db" --forget matmul \
        >>"$SUMMARY" 2>&1 || say "tuning-stop: its cache's tuning was not reset"
    fi
  fi
  # cwm takes a relative folder against its working directory, this one.
  export CWM_KERNEL_CACHE=$KERNEL_CACHE
  # The driver assembles each PTX module cwm loads into machine code, and keeps what it
  # assembled in its own cache (by default in ~/.nv, gone with the machine): kept in the kernel
  # cache's folder, it goes and comes back with cubecl's PTX.
  CUDA_CACHE_PATH=$(realpath -m "$KERNEL_CACHE")/cuda-driver
  export CUDA_CACHE_PATH CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
  # Triton's compiled kernels and tuning results (the reference's Gated DeltaNet and Mamba
  # kernels): its warm-up steps compile and tune them, which the cache saves the next session.
  TRITON_CACHE_DIR=$(realpath -m "$TRITON_CACHE")
  export TRITON_CACHE_DIR
  # cuBLAS, which step 6b's cwm processes load at run time: where the loader does not find it
  # already, the folder of the CUDA toolkit's or PyTorch's copy goes on LD_LIBRARY_PATH.
  if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so'; then
    cublas_dir=$(python3 benches/python/find_cublas.py 2>>"$OUT/compare.log" || true)
    if [ -n "$cublas_dir" ]; then
      export LD_LIBRARY_PATH=$cublas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      say "cuBLAS from $cublas_dir"
    else
      say "cuBLAS not found: step 6b's cells will fail"
    fi
  fi
fi
# Triton 3.6 keeps autotuning results on disk with this set, so the reference stack's later
# processes reuse the first ones' instead of tuning again in their warm-up steps: wall time
# saved, no figure changed.
export TRITON_CACHE_AUTOTUNING=1
# FLA 0.5.0 wants TileLang (79 MiB of wheels, more than a call can bring beside cwm) for Gated
# DeltaNet's backward pass on a Hopper GPU; this times its Triton kernel there instead, and the
# rows say so.
export CWM_REFERENCE_FLA_HOPPER=${CWM_REFERENCE_FLA_HOPPER-triton}

# The caches into $OUT (nothing on the CPU, where none is kept): the kernel cache first, so that
# Triton's is the one left out when both would not come back (benches/session_cache.sh).
pack_caches() {
  if [ -n "${CWM_KERNEL_CACHE:-}" ]; then
    rm -f "$OUT"/triton-cache.tar.xz*
    CACHES=$(benches/session_cache.sh pack "$KERNEL_CACHE" "$OUT" kernel-cache.tar.xz &&
      benches/session_cache.sh pack "$TRITON_CACHE" "$OUT" triton-cache.tar.xz) ||
      CACHES="the caches were not packed"
  fi
}

# Runs compare_stacks.py as step NAME for FAMILIES within what is left, less a margin for the
# steps after (and within STEP_CAP seconds, when set); its table goes under "## NAME" in
# tables.md, its progress likewise in compare.log.
compare() {
  local name=$1 families=$2 sizes=$3 rounds=$4 status=0
  shift 4
  local budget=$(($(left) - 10))
  if [ -n "${STEP_CAP:-}" ] && [ "$budget" -gt "$STEP_CAP" ]; then
    budget=$STEP_CAP
  fi
  if [ "$budget" -lt 30 ]; then
    say "$name: not run, $(left) s left"
    return 0
  fi
  printf '## %s\n\n' "$name" | tee -a "$OUT/compare.log" >>"$OUT/tables.md"
  python3 benches/python/compare_stacks.py --cwm "$CWM" --device "$DEVICE" \
    --families "$families" --sizes "$sizes" --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" \
    --rounds "$rounds" --json-out "$JSONL" --resume --budget-s "$budget" \
    --timeout "$CELL_TIMEOUT" "$@" \
    >>"$OUT/tables.md" 2>>"$OUT/compare.log" || status=$?
  echo | tee -a "$OUT/compare.log" >>"$OUT/tables.md"
  cp "$JSONL" "$OUT/compare-stacks.jsonl"
  pack_caches
  case $status in
    0) say "$name: done, $(left) s left" ;;
    3) say "$name: the time ran out; the same command goes on from $JSONL" ;;
    *) say "$name: some cells failed (compare.log), $(left) s left" ;;
  esac
}

# PROFILE_FAMILIES under both stacks' profilers, at each of PROFILE_SIZES: where a step's time
# goes, kernel by kernel. cwm's process (CWM_KERNEL_PROFILE: cubecl's profiler log and nothing
# else) finds its kernels compiled and tuned in the kernel cache; kernel_profile.py turns the
# log's last tables into one step's and compares it with the step's time without the profiler
# (the comparison's, when step 4 measured it); train_torch.py --profile gives torch.profiler's
# table of the reference's step. All of it goes to profile.md, each process's own output too;
# the logs, compressed, to profile-logs.tar.xz. On the CPU (no kernel profiler in cwm's flex
# build) only the reference's side has a table.
profile_one() {
  local family=$1 size=$2 log=$OUT/profile-$1-$2.log step_s limit=$(($(left) - 40))
  local shape=(--arch "$family" --size "$size" --batch "$BATCH" --seq "$SEQ" --warmup 2 --steps 3)
  local variant=()
  read -ra variant <<<"${PROFILE_CWM_ARGS:-}"
  if [ "$limit" -lt 20 ]; then
    echo "## $family $size: not run, $(left) s left"
    return 0
  fi
  # Capped, so that a cache that did not serve (compilation under the profiler) leaves the
  # steps after it their time.
  [ "$limit" -le 150 ] || limit=150
  step_s=$(python3 -c 'import json, statistics, sys
steps = [r["median_step_s"] for r in map(json.loads, open(sys.argv[1]))
         if r["side"] == "cwm" and r["cell"]["family"] == sys.argv[2]
         and r["cell"]["size"] == sys.argv[3] and r["cell"].get("cwm_args", "") == sys.argv[4]
         and "cwm_env" not in r["cell"]]
print(statistics.median(steps) if steps else "")' "$JSONL" "$family" "$size" \
    "${PROFILE_CWM_ARGS:-}" 2>/dev/null || true)
  echo "## cwm, $family $size, batch $BATCH x $SEQ, 2 warm-up and 3 profiled steps${PROFILE_CWM_ARGS:+, $PROFILE_CWM_ARGS}"
  echo
  if CWM_KERNEL_PROFILE=$log timeout "$limit" "$CWM" model bench --device "$DEVICE" \
    "${shape[@]}" "${variant[@]}" --json 2>&1; then
    echo
    python3 benches/python/kernel_profile.py "$log" --steps 3 ${step_s:+--step-s "$step_s"} \
      2>&1 || true
  else
    echo "(failed or out of time after $limit s)"
  fi
  echo
  echo "## reference, $family $size"
  echo
  timeout 60 python3 benches/python/train_torch.py --stack reference --device "$DEVICE" \
    "${shape[@]}" --profile "$OUT/reference-profile.txt" 2>&1 | grep -v '^USDT:' || true
  echo
  cat "$OUT/reference-profile.txt" 2>/dev/null || echo "(no table)"
  rm -f "$OUT/reference-profile.txt"
  echo
}

profile() {
  if [ "$(left)" -lt 60 ]; then
    say "profile: not run, $(left) s left"
    return 0
  fi
  local family size
  : >"$OUT/profile.md"
  for family in ${PROFILE_FAMILIES//,/ }; do
    for size in ${PROFILE_SIZES//,/ }; do
      profile_one "$family" "$size" >>"$OUT/profile.md"
    done
  done
  # The logs are large (one was over 16 MiB, too big to come back, on 2026-11-26) and
  # repetitive.
  local logs=()
  mapfile -t logs < <(cd "$OUT" && ls profile-*.log 2>/dev/null)
  if [ "${#logs[@]}" -gt 0 ]; then
    tar -C "$OUT" -cf - "${logs[@]}" | xz -T0 -6 >"$OUT/profile-logs.tar.xz"
    (cd "$OUT" && rm -f "${logs[@]}")
  fi
  say "profile: done (profile.md), $(left) s left"
  pack_caches
}

# The steps, one function each (step_NAME, with NAME's dashes as underscores); PLAN runs them.
step_compile() {
  if [ "$PREWARM" -gt 0 ]; then
    STEP_CAP=$PREWARM_S compare compile "$FAMILIES" "$SIZES" 1 --prewarm "$PREWARM" --prewarm-only
  fi
}

# The transformer's cells before the profile, whose cwm processes then find them tuned; without
# a profile (PROFILE_SIZES empty) round1 takes them in FAMILIES' order like the rest.
step_transformer() {
  if [ -n "$PROFILE_SIZES" ] && has_family transformer; then
    compare transformer transformer "$SIZES" 1
  fi
}

step_profile() { profile; }
step_round1() { compare round1 "$FAMILIES" "$SIZES" 1; }

# Step NAME: cwm's products by cuBLAS (`--products NAME`), on a CUDA device only.
cublas_step() {
  if [ "$DEVICE" = cpu ]; then
    say "$1: not run, cuBLAS multiplies on device cuda only"
  else
    compare "$1" "$VARIANT_FAMILIES" "$SIZES" 1 "--cwm-args=--products $1"
  fi
}
# Every lever not yet a default, in one process a cell: the transformer's cells with its
# attention's kernels too, the other families' without (an argument they would ignore, and the
# table would name).
step_levers() {
  local common=--loss\ fused-device recurrent
  [ "$DEVICE" = cpu ] || common="--products cublas-async $common"
  if has_family transformer; then
    compare "levers (transformer)" transformer "$SIZES" 1 \
      "--cwm-args=$common --attention kernels"
  fi
  recurrent=$(families_among ${RECURRENT_NAMES//,/ })
  if [ -n "$recurrent" ]; then
    compare "levers (recurrent)" "$recurrent" "$SIZES" 1 "--cwm-args=$common"
  fi
}

step_cublas() { cublas_step cublas; }
step_cublas_async() { cublas_step cublas-async; }

step_fused_device() {
  compare fused-device "$FAMILIES" "$SIZES" 1 "--cwm-args=--loss fused-device"
}

step_tuning_stop() {
  [ -n "${CWM_KERNEL_CACHE:-}" ] || return 0
  compare tuning-stop "${STOP_FAMILIES:-transformer}" "$SIZES" 1 \
    --cwm-env CUBECL_AUTOTUNE_SHORT_CIRCUIT=1 --cwm-env "CWM_KERNEL_CACHE=$KERNEL_CACHE-stop"
  if [ -f "$KERNEL_CACHE-stop/default.db" ]; then
    # Its headings a level down, under the step's.
    printf '### what the early-stopping tuner chose\n\n' >>"$OUT/tables.md"
    python3 benches/python/tuning_report.py "$KERNEL_CACHE-stop/default.db" --op matmul 2>&1 |
      sed 's/^## /#### /' >>"$OUT/tables.md" || true
  fi
}

step_column_single() {
  compare column-single "$VARIANT_FAMILIES" "$SIZES" 1 "--cwm-args=--column-sums single"
}
step_embedding_select() {
  compare embedding-select "$VARIANT_FAMILIES" "$SIZES" 1 "--cwm-args=--embedding-grad select"
}
step_update_ops() { compare update-ops "$VARIANT_FAMILIES" "$SIZES" 1 "--cwm-args=--update ops"; }
step_fusion_burn() {
  compare fusion-burn "$VARIANT_FAMILIES" "$SIZES" 1 "--cwm-args=--fusion-blocks burn"
}
step_attention_kernels() {
  compare attention-kernels "$VARIANT_FAMILIES" "$SIZES" 1 "--cwm-args=--attention kernels"
}

step_delta_ops() {
  if has_family gdn; then
    compare delta-ops gdn "$SIZES" 1 "--cwm-args=--delta-chunks operations"
  fi
}
step_slice_chunked() {
  local families
  families=$(families_among slice slice_diag)
  if [ -n "$families" ]; then
    compare slice-chunked "$families" "$SIZES" 1 "--cwm-args=--slice-scan chunked"
  fi
}

step_round2() { compare round2 "$FAMILIES" "$SIZES" 2; }

step_all_sizes() {
  if [ -n "$MORE_SIZES" ]; then
    compare all-sizes "$FAMILIES" "$SIZES,$MORE_SIZES" 2
  fi
}

for step in "${PLAN_STEPS[@]}"; do
  "step_${step//-/_}"
done
# The table docs/gpu.md carries, from every call's figures so far: each cell's fastest variant
# beside the reference, and every variant's ratio.
if [ -s "$JSONL" ] && table=$(python3 benches/python/session_table.py "$JSONL" \
  2>>"$OUT/compare.log") && [ -n "$table" ]; then
  printf '## summary\n\n%s\n\n' "$table" >>"$OUT/tables.md"
fi
if [ -n "${CACHES:-}" ]; then
  echo "$CACHES" >>"$SUMMARY"
fi
say "finished with $(left) s left"
