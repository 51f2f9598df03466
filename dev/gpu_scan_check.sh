#!/usr/bin/env bash
# gpu_scan_check.sh - on a machine with an NVIDIA GPU (sm_90 build): build,
# run every CUDA op test (tests/test_ops_cuda.c, CUDA against the CPU
# backend), then compute-sanitizer memcheck and racecheck on the scan tests
# alone (test_hgru1, test_scan; HGRN_TEST_SCAN_QUICK=1 trims test_scan to
# N 1, 37, 1024 and one 16384-token case), and print one line per step.
#
#   dev/gpu_scan_check.sh [build-dir] [log-dir]
#
# Defaults: build-cuda-check and $OUT (or /tmp/gpu_scan_check). Each step
# has a time limit (BUILD_TIMEOUT, TEST_TIMEOUT, SAN_TIMEOUT seconds) so that
# the whole stays within a few minutes on an H100. Exit status: 0 when every
# step passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${1:-$root/build-cuda-check}
logs=${2:-${OUT:-/tmp/gpu_scan_check}}
mkdir -p "$bdir" "$logs"
rows=()
fail=0
row() { rows+=("$(printf '%-26s %-6s %6ss  %s' "$1" "$2" "$3" "$4")"); [ "$2" = ok ] || fail=1; }

# ---- build
t0=$(date +%s)
if timeout "${BUILD_TIMEOUT:-240}" cmake -S "$root" -B "$bdir" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/cmake.log" 2>&1 &&
   timeout "${BUILD_TIMEOUT:-240}" cmake --build "$bdir" -j"$(nproc)" --target test_ops_cuda \
        >"$logs/build.log" 2>&1; then
    row build ok $(($(date +%s) - t0)) "$bdir/test_ops_cuda"
else
    row build FAIL $(($(date +%s) - t0)) "see $logs/cmake.log, $logs/build.log"
    tail -20 "$logs/build.log" 2>/dev/null
    printf '%s\n' "${rows[@]}"
    exit 1
fi
exe=$bdir/test_ops_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$logs/gpu.txt" 2>&1
echo "GPU: $(head -1 "$logs/gpu.txt")"

# ---- every op test, both precisions, and the model tests
t0=$(date +%s)
OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} timeout "${TEST_TIMEOUT:-240}" "$exe" \
    >"$logs/test_ops_cuda.log" 2>&1
rc=$?
nok=$(grep -c ' ok$' "$logs/test_ops_cuda.log")
nfail=$(grep -c 'FAIL' "$logs/test_ops_cuda.log")
worst=$(grep -o 'worst relative error:.*' "$logs/test_ops_cuda.log" | tail -1)
if [ $rc = 0 ]; then st=ok; elif [ $rc = 77 ]; then st=SKIP; else st=FAIL; fi
row "test_ops_cuda (all)" $st $(($(date +%s) - t0)) "rc $rc, $nok checks ok, $nfail FAIL; $worst"
grep -B1 -A1 'FAIL' "$logs/test_ops_cuda.log" | head -20

# ---- sanitizers on the scan tests
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
    t0=$(date +%s)
    if [ ! -x "$san" ]; then
        row "sanitizer $tool" SKIP 0 "compute-sanitizer not found"
        continue
    fi
    HGRN_TEST_FILTER=test_hgru1,test_scan HGRN_TEST_SCAN_QUICK=1 OMP_NUM_THREADS=8 \
        timeout "${SAN_TIMEOUT:-150}" "$san" --tool $tool --error-exitcode 9 "$exe" \
        >"$logs/sanitizer_$tool.log" 2>&1
    rc=$?
    summary=$(grep -m1 -o 'ERROR SUMMARY:.*\|RACECHECK SUMMARY:.*' "$logs/sanitizer_$tool.log")
    nok=$(grep -c ' ok$' "$logs/sanitizer_$tool.log")
    [ $rc = 0 ] && st=ok || st=FAIL
    [ $rc = 124 ] && summary="timed out after ${SAN_TIMEOUT:-150}s; $summary"
    row "sanitizer $tool (scan)" $st $(($(date +%s) - t0)) "rc $rc, $nok checks ok; $summary"
    [ $rc = 0 ] || grep -m5 'Invalid\|Race\|hazard\|FAIL' "$logs/sanitizer_$tool.log"
done

echo
printf '%-26s %-6s %7s  %s\n' step status time detail
printf '%s\n' "${rows[@]}"
echo "logs in $logs"
exit $fail
