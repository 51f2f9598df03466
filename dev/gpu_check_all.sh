#!/usr/bin/env bash
# gpu_check_all.sh - on a lent GPU machine (offline: packages and datasets
# from .offline-deps), from the repository root: build (Release, sm_90) in
# /tmp/gb, run every GPU test verbosely (test_ops_cuda, test_lra_cuda,
# test_train_cuda, test_comm_nccl on 2 GPUs where the machine has them), the
# rest of ctest without the slow CPU accuracy run, then `hgrn bench --ops`,
# `hgrn bench --mixers`, and `hgrn bench` on DeiT-Tiny and the LRA recipe.
# Ends with one table; logs in $OUT (one tarball, logs.tgz, plus summary.txt).
set -u
source .offline-deps/unpack.sh >/dev/null
ln -sfn /tmp/offline-deps/usr/share/datasets /usr/share/datasets
OUT=${OUT:-/tmp/gpu_check_all}; mkdir -p "$OUT"; L=/tmp/gca_logs; rm -rf $L; mkdir -p $L
B=/tmp/gb; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
rows=()
row() { rows+=("$1|$2|$3"); echo "$1: $2 ($3) at $(el) s"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >$L/cmake.log 2>&1 &&
       cmake --build $B -j 32 >$L/build.log 2>&1; }; then tail -40 $L/build.log; exit 1; fi
row build ok "$(el) s"
for t in ${TESTS:-test_ops_cuda test_lra_cuda test_train_cuda}; do
  s=$(date +%s); timeout 300 $B/$t >$L/$t.log 2>&1; rc=$?
  row $t "rc=$rc" "$(( $(date +%s)-s )) s; $(grep -c '\[  FAILED  \]' $L/$t.log) failed; $(grep -m1 'worst relative' $L/$t.log)"
  grep -E "FAIL|lra model step|hgru2.*16384|segment" $L/$t.log | head -30
done
s=$(date +%s); (cd $B && timeout 200 ctest -R test_comm_nccl -V >$L/comm_nccl.log 2>&1); rc=$?
row test_comm_nccl "rc=$rc" "$(( $(date +%s)-s )) s"; grep -E "^(ok|FAIL|skip)" $L/comm_nccl.log | head
s=$(date +%s); (cd $B && timeout 400 ctest -j8 -LE slow -E "test_ops_cuda|test_lra_cuda|test_train_cuda|test_comm_nccl" --timeout 300 >$L/ctest.log 2>&1); rc=$?
row "ctest (the rest)" "rc=$rc" "$(( $(date +%s)-s )) s; $(grep 'tests passed' $L/ctest.log)"
grep -E "\*\*\*|Failed" $L/ctest.log | head
if [ -z "${NOBENCH:-}" ]; then
timeout 300 $B/hgrn bench --ops >$L/bench_ops.txt 2>&1; row "bench --ops" "rc=$?" "$(el) s"
grep -E "^prec|copy|hgru1|hgru2|batchnorm" $L/bench_ops.txt | head -20
timeout 300 $B/hgrn bench --mixers >$L/bench_mixers.txt 2>&1; row "bench --mixers" "rc=$?" "$(el) s"
grep -E "^mixer|^(hgru|lru|min)" $L/bench_mixers.txt
for c in hgrn1_deit_tiny lra_image_hgrn1; do
  timeout 120 $B/hgrn bench --config configs/$c.cfg --device cuda --steps 20 >$L/bench_$c.txt 2>&1
  row "bench $c" "rc=$?" "$(grep -E '^train ' $L/bench_$c.txt | head -1)"
done
fi
echo; echo "step|result|detail"; printf '%s\n' "${rows[@]}" | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $L .
