#!/usr/bin/env bash
# bench_scan.sh - on a GPU machine: build, run the CUDA op tests (CUDA vs CPU,
# fp32 and bf16), then the kernel timing table (`hgrn bench --ops`).
#
#   dev/bench_scan.sh [build-dir] [log-dir]
#
# SANITIZE=1 also runs compute-sanitizer memcheck and racecheck on the tests.
# NCU=1 profiles the HGRU1 scan kernels (fp32, B 256, N 256, D 192: the
# fifth launch of each in `hgrn bench --ops`, after the warm-up) with Nsight
# Compute.
# HGRN_TEST_FILTER=test_hgru1 (passed through the environment) limits the
# tests and sanitizer runs to the named tests.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${1:-$root/build-gpu}
logs=${2:-${OUT:-/tmp}}
mkdir -p "$bdir" "$logs"
if ! { cmake -S "$root" -B "$bdir" -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/cmake.log" 2>&1 &&
       cmake --build "$bdir" -j"$(nproc)" --target test_ops_cuda hgrn >"$logs/build.log" 2>&1; }; then
    echo "build failed"; tail -30 "$logs/build.log"; exit 1
fi
exe=$bdir/test_ops_cuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
rc=0
OMP_NUM_THREADS=8 "$exe" >"$logs/test_ops_cuda.log" 2>&1 || rc=$?
"$bdir/hgrn" bench --ops >"$logs/bench_ops.txt" 2>&1 || rc=$?
if [ "${SANITIZE:-0}" = 1 ]; then
    for tool in memcheck racecheck; do
        timeout ${SAN_TIMEOUT:-240} compute-sanitizer --tool $tool --error-exitcode 9 "$exe" \
            >"$logs/sanitizer_$tool.log" 2>&1
        echo "compute-sanitizer $tool: rc=$? ($(grep -c 'ERROR SUMMARY: 0 errors' "$logs/sanitizer_$tool.log") clean summaries)"
        grep -m3 "ERROR SUMMARY\|Invalid\|Race" "$logs/sanitizer_$tool.log"
    done
fi
if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
    st=smsp__average_warps_issue_stalled
    mets=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
    for s in long_scoreboard barrier short_scoreboard wait math_pipe_throttle lg_throttle mio_throttle not_selected no_instruction; do
        mets=$mets,${st}_${s}_per_issue_active.ratio
    done
    for k in fwd bwd; do
        timeout 300 ncu --clock-control none -k regex:k_hgru1_$k -s 4 -c 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats --metrics "$mets" \
            "$bdir/hgrn" bench --ops >"$logs/ncu_$k.log" 2>&1
        echo "ncu $k: rc=$?"
        grep -E "Duration|Throughput|Achieved Occupancy|Registers Per|Block Limit|stalled|inst_executed|warps_active|issue_active" "$logs/ncu_$k.log" | head -40
    done
fi
grep -E "FAIL|NaN mismatch|\[  (PASSED|FAILED)|worst" "$logs/test_ops_cuda.log" | head -40
cat "$logs/bench_ops.txt"
echo "rc=$rc"
exit $rc
