#!/usr/bin/env bash
# bench_scan.sh - build the CUDA op tests, run them (CUDA vs CPU, fp32 and
# bf16), then the timing table (HGRU1 scan at B=256 N=256 D=192 and the LRA
# shape, device copy bandwidth, the model's GEMMs).
#
#   scripts/bench_scan.sh [build-dir] [log-dir]
#
# Falls back to a direct nvcc/cc build of cuda/*.cu + the test + the CPU
# backend when the CMake build of the whole tree fails (other parts of the
# tree being mid-edit). SANITIZE=1 also runs compute-sanitizer memcheck and
# racecheck on the tests (without the timings). HGRN_TEST_FILTER=test_hgru1 (passed
# through the environment) limits the tests and sanitizer runs to the HGRU1
# scan; HGRN_BENCH_NOGEMM=1 leaves the GEMMs out of the timing table.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${1:-$root/build-gpu}
logs=${2:-${OUT:-/tmp}}
mkdir -p "$bdir" "$logs"
exe=""
if cmake -S "$root" -B "$bdir" -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/cmake.log" 2>&1 &&
   make -C "$bdir" -j"$(nproc)" test_ops_cuda >"$logs/build.log" 2>&1; then
    exe=$bdir/test_ops_cuda
else
    echo "CMake build failed (see build.log); building the op test directly"
    tail -20 "$logs/build.log" 2>/dev/null
    d=$bdir/direct
    mkdir -p "$d"
    ok=1
    for f in "$root"/cuda/*.cu; do
        nvcc -arch=sm_90 -O3 --use_fast_math -lineinfo -Xcompiler=-Wall -I"$root/src" \
            -I"$root/cuda" -c "$f" -o "$d/$(basename "$f" .cu).o" >>"$logs/build.log" 2>&1 || ok=0
    done
    for f in "$root/src/backend_cpu.c" "$root/src/rng.c" "$root/tests/test_ops_cuda.c"; do
        cc -O2 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra \
            -Wno-unused-parameter -I"$root/src" -I"$root/tests" -c "$f" \
            -o "$d/$(basename "$f" .c).o" >>"$logs/build.log" 2>&1 || ok=0
    done
    cudalib=$(dirname "$(dirname "$(command -v nvcc)")")/lib64
    [ $ok = 1 ] && nvcc -o "$d/test_ops_cuda" "$d"/*.o -Xcompiler -fopenmp -L"$cudalib" \
        -lcublasLt -lcublas -lopenblas -lcmocka -lm >>"$logs/build.log" 2>&1 && exe=$d/test_ops_cuda
fi
[ -n "$exe" ] || { echo "build failed"; tail -30 "$logs/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
rc=0
HGRN_BENCH=1 OMP_NUM_THREADS=8 "$exe" >"$logs/test_ops_cuda.log" 2>&1 || rc=$?
if [ "${SANITIZE:-0}" = 1 ]; then
    for tool in memcheck racecheck; do
        timeout ${SAN_TIMEOUT:-240} compute-sanitizer --tool $tool --error-exitcode 9 "$exe" \
            >"$logs/sanitizer_$tool.log" 2>&1
        echo "compute-sanitizer $tool: rc=$? ($(grep -c 'ERROR SUMMARY: 0 errors' "$logs/sanitizer_$tool.log") clean summaries)"
        grep -m3 "ERROR SUMMARY\|Invalid\|Race" "$logs/sanitizer_$tool.log"
    done
fi
if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null; then   # profile the scan kernels (fp32, B256)
    st=smsp__average_warps_issue_stalled
    mets=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
    for s in long_scoreboard barrier short_scoreboard wait math_pipe_throttle lg_throttle mio_throttle not_selected no_instruction; do
        mets=$mets,${st}_${s}_per_issue_active.ratio
    done
    for k in fwd bwd; do
        HGRN_BENCH_ONLY=1 timeout 150 ncu --clock-control none -k regex:k_hgru1_$k -s 3 -c 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats --metrics "$mets" \
            "$exe" >"$logs/ncu_$k.log" 2>&1
        echo "ncu $k: rc=$?"
        grep -E "Duration|Throughput|Achieved Occupancy|Registers Per|Block Limit|stalled|inst_executed|warps_active|issue_active" "$logs/ncu_$k.log" | head -40
    done
fi
grep -E "FAIL|NaN mismatch|\[  (PASSED|FAILED)|worst" "$logs/test_ops_cuda.log" | head -40
sed -n '/==== timings/,$p' "$logs/test_ops_cuda.log"
echo "test rc=$rc"
exit $rc
