#!/usr/bin/env bash
# The kernel sandboxes of dev/cuda: every Makefile target builds (nvcc -O3
# -arch=sm_90; one whose library headers are missing here is named); the
# scan sandboxes refuse bad arguments with exit 2 and a message naming the
# argument, before any CUDA call; without a
# GPU they fail with exit 1 and the CUDA error, and with one every variant
# matches its CPU reference, in bf16 and fp32, on shapes with partial chunks
# and padding channels. Skipped (77) where there is no nvcc.
# usage: test_dev_cuda.sh HGRN_BINARY SOURCE_DIR
set -uo pipefail
src=${2:?usage: test_dev_cuda.sh HGRN_BINARY SOURCE_DIR}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "no nvcc: skipped"; exit 77; }
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# built by the Makefile's own rules, in a copy (nothing written to the tree);
# a target whose library headers this machine lacks (nvJPEG) is named, not failed
if ! { mkdir -p "$work/cuda" && cp "$src"/dev/cuda/Makefile "$src"/dev/cuda/*.cu "$src"/dev/cuda/*.h "$work/cuda/"; }; then
  echo "FAIL: cannot copy dev/cuda"; exit 1
fi
targets=$(sed -n 's/^TARGETS = //p' "$src/dev/cuda/Makefile")
[ -n "$targets" ] || bad "dev/cuda/Makefile: no TARGETS line"
for t in $targets; do
  if ! make -s -C "$work/cuda" NVCC="$nvcc" "$t" >"$work/$t.log" 2>&1; then
    if grep -q "fatal error: .*\.h: No such file or directory" "$work/$t.log"; then
      echo "$t: not built here: $(grep -m1 'fatal error' "$work/$t.log")"
    else
      cat "$work/$t.log"; bad "$t does not build"
    fi
  fi
done
for t in hgru1_scan hgru2_scan; do [ -x "$work/cuda/$t" ] || bad "$t was not built"; done

# refused: exit 2, a message naming what is wrong, nothing else run
refuse() {   # WANT_WORD PROGRAM ARGS...
  local want=$1 prog=$2; shift 2
  "$work/cuda/$prog" "$@" >"$work/out" 2>"$work/err"; local rc=$?
  [ $rc -eq 2 ] || bad "$prog $*: exit $rc, expected 2"
  grep -q -- "$want" "$work/err" || bad "$prog $*: message does not name '$want': $(cat "$work/err")"
  [ ! -s "$work/out" ] || bad "$prog $*: printed before refusing: $(cat "$work/out")"
}
refuse variant hgru1_scan 6
refuse variant hgru1_scan 1x
refuse precision hgru1_scan 1 fp16
refuse "N 300" hgru1_scan 1 bf16 1 300 8
refuse "variant 4" hgru1_scan 4 bf16 1 16 12
refuse usage hgru1_scan 1 bf16 1 16
refuse "D must be a positive" hgru1_scan 1 bf16 1 16 -3
refuse variant hgru2_scan 0
refuse "head size" hgru2_scan 1 fp32 1 32 24
refuse "B must be" hgru2_scan all bf16 x 32 16

if ! nvidia-smi -L >/dev/null 2>&1; then
  # no GPU: the first CUDA call fails, named, exit 1
  "$work/cuda/hgru1_scan" 1 bf16 1 16 16 >"$work/out" 2>"$work/err"; rc=$?
  [ $rc -eq 1 ] || bad "hgru1_scan without a GPU: exit $rc, expected 1"
  grep -q "cuda" "$work/err" || bad "hgru1_scan without a GPU: no CUDA error named: $(cat "$work/err")"
  [ $fail -eq 0 ] && echo "compiled and refused as expected; no GPU: not run"
  exit $fail
fi

# a GPU: every variant against the reference (exit 1 on a mismatch)
run() {
  "$work/cuda/$1" "${@:2}" >"$work/out" 2>&1 || { cat "$work/out"; bad "$*"; return; }
  grep -E "^variant [0-9]+, " "$work/out"
}
run hgru1_scan all bf16 4 256 64     # whole chunks
run hgru1_scan all fp32 3 201 40     # a partial chunk, padding channels (variant 4 skipped)
run hgru1_scan all bf16 2 37 24
run hgru2_scan all bf16 4 256 64
run hgru2_scan all fp32 2 1000 32    # variant 2 on 16 chunks of 64, the last partial
run hgru2_scan all bf16 3 45 16
exit $fail
