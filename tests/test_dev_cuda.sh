#!/usr/bin/env bash
# The kernel sandboxes of dev/cuda.
#  - On the CPU emulation (dev/cuda/emu; g++ -std=c++20, ASan + UBSan): every
#    variant of the scan sandboxes matches its CPU reference, in bf16 and
#    fp32, on shapes with partial chunks, padding channels and short sequences.
#  - With nvcc: every Makefile target builds (nvcc -O3 -arch=sm_90; one whose
#    library headers are missing here is named, not failed); without a GPU a
#    run fails with exit 1 and the CUDA error; with one every variant matches
#    its reference on the same shapes.
#  - Either way: bad arguments are refused with exit 2 and a message naming
#    the argument, before anything is printed or run.
# Skipped (77) with neither a C++20 g++ nor nvcc.
# usage: test_dev_cuda.sh HGRN_BINARY SOURCE_DIR
set -uo pipefail
src=${2:?usage: test_dev_cuda.sh HGRN_BINARY SOURCE_DIR}
dev=$src/dev/cuda
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
checked=0

# every variant against the reference (the sandbox exits 1 on a mismatch)
matches() {   # DIR PROGRAM ARGS...
  local dir=$1 prog=$2; shift 2
  "$dir/$prog" "$@" >"$work/out" 2>&1 || { cat "$work/out"; bad "$prog $*"; return; }
  local want; want=$( [ "$prog" = hgru1_scan ] && echo 5 || echo 3)
  [ "$(grep -cE '^variant [0-9]+, ' "$work/out")" -ge $((want - 1)) ] ||
    { cat "$work/out"; bad "$prog $*: variants missing"; }
  grep -E "^variant [0-9]+, " "$work/out"
}
all_shapes() {   # DIR
  matches "$1" hgru1_scan all bf16 1 256 32     # whole chunks, 512-thread blocks
  matches "$1" hgru1_scan all fp32 2 201 40     # a partial chunk, padding channels
  matches "$1" hgru1_scan all bf16 1 9 20       # fewer chunks than a warp holds (variant 4 skipped)
  matches "$1" hgru2_scan all fp32 1 300 48     # variant 2 on 5 chunks, the last partial
  matches "$1" hgru2_scan all bf16 2 45 64
  matches "$1" hgru2_scan all fp32 1 1 16
}

# refused: exit 2, a message naming what is wrong, nothing printed
refusals() {   # DIR
  local dir=$1
  refuse() {   # WANT PROGRAM ARGS...
    local want=$1 prog=$2; shift 2
    "$dir/$prog" "$@" >"$work/out" 2>"$work/err"; local rc=$?
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
}

# ---- the CPU emulation
if command -v g++ >/dev/null && command -v python3 >/dev/null &&
   echo '#include <barrier>' | g++ -std=c++20 -x c++ -fsyntax-only - 2>/dev/null; then
  mkdir -p "$work/emu"
  for t in hgru1_scan hgru2_scan; do
    if ! python3 "$dev/emu/emulate.py" "$dev/$t.cu" >"$work/emu/$t.cpp"; then
      bad "emulate.py $t.cu"; continue
    fi
    g++ -std=c++20 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -Wall \
        -Wno-unknown-pragmas -I"$dev/emu" -I"$dev" "$work/emu/$t.cpp" -o "$work/emu/$t" -pthread \
        >"$work/emu/$t.log" 2>&1 || { cat "$work/emu/$t.log"; bad "$t does not build on the emulation"; }
  done
  if [ -x "$work/emu/hgru1_scan" ] && [ -x "$work/emu/hgru2_scan" ]; then
    echo "CPU emulation:"
    all_shapes "$work/emu"
    refusals "$work/emu"
    checked=1
  fi
else
  echo "no g++ with C++20 <barrier> (or no python3): the emulation is not run"
fi

# ---- nvcc: the Makefile's own rules, in a copy (nothing written to the tree)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
  if ! { mkdir -p "$work/cuda" && cp "$dev"/Makefile "$dev"/*.cu "$dev"/*.h "$work/cuda/"; }; then
    echo "FAIL: cannot copy dev/cuda"; exit 1
  fi
  targets=$(sed -n 's/^TARGETS = //p' "$dev/Makefile")
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
  if [ -x "$work/cuda/hgru1_scan" ] && [ -x "$work/cuda/hgru2_scan" ]; then
    refusals "$work/cuda"
    if nvidia-smi -L >/dev/null 2>&1; then
      echo "GPU:"
      all_shapes "$work/cuda"
    else   # the first CUDA call fails, named, exit 1
      "$work/cuda/hgru1_scan" 1 bf16 1 16 16 >"$work/out" 2>"$work/err"; rc=$?
      [ $rc -eq 1 ] || bad "hgru1_scan without a GPU: exit $rc, expected 1"
      grep -q "cuda" "$work/err" || bad "hgru1_scan without a GPU: no CUDA error named: $(cat "$work/err")"
      echo "nvcc builds; no GPU: the sandboxes not run on one"
    fi
  else
    bad "hgru1_scan or hgru2_scan was not built by nvcc"
  fi
  checked=1
fi
[ $checked -eq 1 ] || { echo "neither the emulation nor nvcc: skipped"; exit 77; }
exit $fail
