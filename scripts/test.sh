#!/usr/bin/env bash
# The test command: installs dependencies (apt-get, as root), builds, runs the
# whole ctest suite (and its distributed and evaluation tests a second time
# under another OpenBLAS kernel set), fuzzes every parser for a bounded time each
# (HGRN_FUZZ_SECONDS per target, default 60, as many targets at once as there
# are cores: 3 minutes for the 6 targets on 2 cores; scripts/fuzz.sh), then rebuilds
# with AddressSanitizer + UBSan and runs the suite again. Ends with one line
# per fuzz target: runs, seconds, crashes. HGRN_FUZZ_SECONDS=0 /
# HGRN_SKIP_SANITIZE=1 skip those passes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=build bash scripts/build.sh
(cd build && ctest --output-on-failure -j2 --timeout 1500)
# The distributed and evaluation tests again under another OpenBLAS kernel
# set, so that a result depending on the BLAS's kernels fails on any CI
# machine (docs/DESIGN.md, "Determinism"): SkylakeX where the CPU has
# AVX-512, Haswell otherwise; the other one the CPU has (Haswell, or
# Sandybridge) when OpenBLAS already chose that family by itself.
blas_lib=$(ldd build/hgrn | awk '/libopenblas|libblas/ { print $3; exit }')
blas_own=$(python3 -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1]); lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())' "${blas_lib:-libopenblas.so.0}" 2>/dev/null) || blas_own=unknown
blas_family() { case "${1,,}" in zen | haswell) echo haswell ;; skylakex | cooperlake | sapphirerapids) echo skylakex ;; *) echo "${1,,}" ;; esac; }
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
  core=SkylakeX; other=Haswell
else
  core=Haswell; other=Sandybridge
fi
[ "$(blas_family "$blas_own")" = "$(blas_family "$core")" ] && core=$other
echo "== distributed, evaluation, EMA and accumulation tests again with OPENBLAS_CORETYPE=$core (the first pass: OpenBLAS's $blas_own) =="
(cd build && OPENBLAS_CORETYPE=$core ctest --output-on-failure -j2 --timeout 1500 \
  -R '^(test_distributed|test_evaluate|test_eval_classify|test_model|test_ema|test_accum)$')
fuzz=${HGRN_FUZZ_SECONDS:-60}
fuzz_rc=0
if [ "$fuzz" != 0 ]; then
  echo "== libFuzzer over every parser, ${fuzz} s each =="
  OUT=build/fuzz bash scripts/fuzz.sh "$fuzz" || fuzz_rc=$?
fi
if [ "${HGRN_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== sanitizer build (address,undefined) =="
  BUILD_DIR=build-asan bash scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DHGRN_SANITIZE=address,undefined -DHGRN_CUDA=OFF
  # the accuracy run (label slow) is covered by the first pass
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j2 --timeout 1500 -LE slow)
fi
if [ "$fuzz" != 0 ]; then
  echo "== fuzzing (${fuzz} s per target) =="
  cat build/fuzz/summary.txt
fi
exit $fuzz_rc
