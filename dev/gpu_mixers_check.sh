#!/usr/bin/env bash
# gpu_mixers_check.sh - the scan mixers (lru, mingru, minlstm) on a machine
# with an NVIDIA GPU (sm_90 build), one line per step at the end:
#   1. build hgrn and test_ops_cuda;
#   2. test_ops_cuda, all of it: every op against the CPU backend in fp32 and
#      bf16 (the new mingate, lru_params and diag ops, the scan with fp32
#      decays, the gated recurrences and whole mixer layers at 16,384 tokens)
#      and the whole-model comparison of every registered mixer, causal too;
#   3. compute-sanitizer memcheck on the new ops' tests (HGRN_TEST_FILTER,
#      HGRN_TEST_SCAN_QUICK=1: one 16,384-token case each);
#   4. hgrn bench --mixers (bf16): forward + backward ms and GB/s per mixer
#      at 256 .. 16,384 tokens, batch 50 width 512 and batch 8 width 64;
#   5. each Fashion-MNIST demo config trained 2 epochs on the GPU (the three
#      scan mixers, and hgrn1 / hgrn2 for comparison): test top-1, wall time.
#
#   dev/gpu_mixers_check.sh [build-dir] [log-dir] [fashion-mnist-dir]
#
# Defaults: build-cuda-mixers, $OUT (or /tmp/gpu_mixers_check),
# /usr/share/datasets/fashion-mnist (step 5 is skipped without it). Each
# step has a time limit (BUILD_TIMEOUT, TEST_TIMEOUT, SAN_TIMEOUT,
# BENCH_TIMEOUT, TRAIN_TIMEOUT seconds) so that the whole stays under 8
# minutes on an H100. Exit status: 0 when every step passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=${1:-$root/build-cuda-mixers}
logs=${2:-${OUT:-/tmp/gpu_mixers_check}}
fm=${3:-/usr/share/datasets/fashion-mnist}
mkdir -p "$bdir" "$logs"
rows=()
fail=0
row() { rows+=("$(printf '%-30s %-6s %6ss  %s' "$1" "$2" "$3" "$4")"); [ "$2" = ok ] || [ "$2" = SKIP ] || fail=1; }
summary() {
    echo
    printf '%-30s %-6s %7s  %s\n' step status time detail
    printf '%s\n' "${rows[@]}"
    echo "logs in $logs"
}
start_all=$(date +%s)

# ---- 1. build
t0=$(date +%s)
if timeout "${BUILD_TIMEOUT:-240}" cmake -S "$root" -B "$bdir" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES=90 >"$logs/cmake.log" 2>&1 &&
   timeout "${BUILD_TIMEOUT:-240}" cmake --build "$bdir" -j"$(nproc)" --target hgrn test_ops_cuda \
        >"$logs/build.log" 2>&1; then
    row build ok $(($(date +%s) - t0)) "$bdir/hgrn, $bdir/test_ops_cuda"
else
    row build FAIL $(($(date +%s) - t0)) "see $logs/cmake.log, $logs/build.log"
    tail -20 "$logs/build.log" 2>/dev/null
    summary
    exit 1
fi
grep -i 'warning' "$logs/build.log" | head -5
exe=$bdir/test_ops_cuda
hgrn=$bdir/hgrn
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$logs/gpu.txt" 2>&1
echo "GPU: $(head -1 "$logs/gpu.txt")"

# ---- 2. every op test and the model tests, both precisions
t0=$(date +%s)
OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} timeout "${TEST_TIMEOUT:-240}" "$exe" \
    >"$logs/test_ops_cuda.log" 2>&1
rc=$?
nok=$(grep -c ' ok$' "$logs/test_ops_cuda.log")
nfail=$(grep -c 'FAIL' "$logs/test_ops_cuda.log")
worst=$(grep -o 'worst relative error:.*' "$logs/test_ops_cuda.log" | tail -1)
if [ $rc = 0 ]; then st=ok; elif [ $rc = 77 ]; then st=SKIP; else st=FAIL; fi
[ $rc = 124 ] && worst="timed out after ${TEST_TIMEOUT:-240}s; $worst"
row "test_ops_cuda (all)" $st $(($(date +%s) - t0)) "rc $rc, $nok checks ok, $nfail FAIL; $worst"
grep -B1 -A1 'FAIL' "$logs/test_ops_cuda.log" | head -20
# the new parts, as a digest: the model comparison per mixer and the long cases
grep -E 'model step 1|N16384 layer|N 16384' "$logs/test_ops_cuda.log" >"$logs/test_ops_cuda_mixers.txt"

# ---- 3. memcheck on the new ops' tests
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t0=$(date +%s)
if [ ! -x "$san" ]; then
    row "memcheck (scan mixer ops)" SKIP 0 "compute-sanitizer not found"
else
    HGRN_TEST_FILTER=test_mingate,test_lru_params,test_diag,test_min_long,test_mixer_layers \
    HGRN_TEST_SCAN_QUICK=1 OMP_NUM_THREADS=8 \
        timeout "${SAN_TIMEOUT:-150}" "$san" --tool memcheck --error-exitcode 9 "$exe" \
        >"$logs/sanitizer_memcheck.log" 2>&1
    rc=$?
    sum=$(grep -m1 -o 'ERROR SUMMARY:.*' "$logs/sanitizer_memcheck.log")
    nok=$(grep -c ' ok$' "$logs/sanitizer_memcheck.log")
    [ $rc = 0 ] && st=ok || st=FAIL
    [ $rc = 124 ] && sum="timed out after ${SAN_TIMEOUT:-150}s; $sum"
    row "memcheck (scan mixer ops)" $st $(($(date +%s) - t0)) "rc $rc, $nok checks ok; $sum"
    [ $rc = 0 ] || grep -m5 'Invalid\|FAIL' "$logs/sanitizer_memcheck.log"
fi

# ---- 4. the long-sequence table
t0=$(date +%s)
timeout "${BENCH_TIMEOUT:-150}" "$hgrn" bench --mixers >"$logs/bench_mixers.txt" 2>&1
rc=$?
[ $rc = 0 ] && st=ok || st=FAIL
row "hgrn bench --mixers" $st $(($(date +%s) - t0)) "rc $rc, $(grep -c '^[a-z0-9]* *[0-9]' "$logs/bench_mixers.txt") rows: $logs/bench_mixers.txt"
cat "$logs/bench_mixers.txt"

# ---- 5. Fashion-MNIST, 2 epochs per config on the GPU
if [ ! -d "$fm" ]; then
    row "fmnist training" SKIP 0 "no Fashion-MNIST at $fm"
else
    for m in lru mingru minlstm hgrn1 hgrn2; do
        t0=$(date +%s.%N)
        timeout "${TRAIN_TIMEOUT:-90}" "$hgrn" train --config "$root/configs/fmnist_${m}_tiny.cfg" \
            --data "$fm" --device cuda --train.epochs 2 --out "$logs/fm_$m" \
            >"$logs/fm_$m.log" 2>&1
        rc=$?
        t1=$(date +%s.%N)
        wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}')
        top1=$(grep -o 'best val top-1 [0-9.]*%' "$logs/fm_$m.log" | tail -1)
        [ $rc = 0 ] && st=ok || st=FAIL
        row "fmnist_${m}_tiny, 2 epochs" $st "${wall%.*}" "rc $rc, test ${top1:-top-1 ?}, wall ${wall} s (bf16)"
        [ $rc = 0 ] || tail -3 "$logs/fm_$m.log"
    done
fi

summary
echo "total $(($(date +%s) - start_all)) s"
exit $fail
