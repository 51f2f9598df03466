#!/usr/bin/env bash
# gpu_final_check.sh - on the project's lent GPU machine (offline: packages
# and datasets come from .offline-deps), from the repository root: build
# everything, hgrn bench on the four ImageNet configs (bf16, batch 256), an
# out-of-memory batch and the batch its message suggests, ctest without the
# slow CPU accuracy run (CI runs that), test_train_cuda three more times (its
# eager and graph-replayed steps must agree bit for bit: a race shows there,
# not always on the first run), compute-sanitizer memcheck and racecheck on
# the op table (test_backend_ops: every op, the residual and residual_ln rows
# among them) and on test_ops_cuda's HGRU1, HGRU2, ln_gate and ln_residual
# tests, and the kernel timings of `hgrn bench --ops`. Logs to $OUT.
source .offline-deps/unpack.sh >/dev/null; ln -sfn /tmp/offline-deps/usr/share/datasets /usr/share/datasets
t0=$(date +%s)
(cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j16 >$OUT/build.log 2>&1) || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s)-t0 ))s"
for c in hgrn1_deit_tiny hgrn1_deit_small hgrn2_deit_tiny hgrn2_deit_small; do
  timeout 90 build-gpu/hgrn bench --config configs/$c.cfg --device cuda --batch 256 --steps 20 > $OUT/bench_$c.txt 2>&1
  echo "$c rc=$? $(grep -E '^train  ' $OUT/bench_$c.txt | head -1 | awk '{print $2, $3}') eval $(grep -E '^eval' $OUT/bench_$c.txt | awk '{print $2}') $(grep -E '^device mem' $OUT/bench_$c.txt | awk '{print $3, $4}')"
done
echo "benches done $(( $(date +%s)-t0 ))s"
# out of device memory: the message names the bytes and suggests a batch; that batch must run
oom=$(timeout 90 build-gpu/hgrn bench --config configs/hgrn1_deit_tiny.cfg --device cuda --batch 60000 --steps 1 2>&1); orc=$?
fit=$(echo "$oom" | sed -n 's/.*; batch \([0-9]*\) should fit.*/\1/p')
echo "oom batch 60000 rc=$orc: $(echo "$oom" | tail -1)"
if [ -n "$fit" ]; then
  timeout 240 build-gpu/hgrn bench --config configs/hgrn1_deit_tiny.cfg --device cuda --batch $fit --steps 2 > $OUT/bench_oom_fit.txt 2>&1
  echo "suggested batch $fit rc=$? $(grep -E '^train  ' $OUT/bench_oom_fit.txt | awk '{print $2, $3}') $(grep -E '^device mem' $OUT/bench_oom_fit.txt | awk '{print $3, $4}')"
fi
(cd build-gpu && timeout 240 ctest -j4 -LE slow --timeout 230 > $OUT/ctest.log 2>&1); echo "ctest rc=$?"; tail -25 $OUT/ctest.log | grep -E "tests passed|Failed|\*\*\*|Not Run|Skipped|sec$" | head -25
for i in 1 2 3; do build-gpu/test_train_cuda > $OUT/train_cuda_$i.log 2>&1; echo "test_train_cuda run $i rc=$?"; done
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/test_backend_ops > $OUT/san_op_table_$tool.log 2>&1
  echo "$tool op table (test_backend_ops) rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_op_table_$tool.log)"
  HGRN_TEST_FILTER=test_ln_gate,test_ln_residual timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/test_ops_cuda > $OUT/san_norms_$tool.log 2>&1
  echo "$tool ln_gate+ln_residual rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_norms_$tool.log)"
  HGRN_TEST_FILTER=test_hgru1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/test_ops_cuda > $OUT/san_hgru1_$tool.log 2>&1
  echo "$tool hgru1 rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_hgru1_$tool.log)"
done
for tool in memcheck racecheck; do
  HGRN_TEST_FILTER=test_hgru2 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/test_ops_cuda > $OUT/san_hgru2_$tool.log 2>&1
  echo "$tool hgru2 rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_hgru2_$tool.log)"
done
timeout 300 build-gpu/hgrn bench --ops > $OUT/bench_ops.txt 2>&1; echo "bench --ops rc=$?"
grep -E "^prec|copy|hgru1|hgru2|ln_gate|residual" $OUT/bench_ops.txt
echo "total $(( $(date +%s)-t0 ))s"
