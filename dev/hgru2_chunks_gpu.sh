#!/usr/bin/env bash
# hgru2_chunks_gpu.sh - on a lent GPU machine, from the repository root: the
# HGRU2 scan's chunked (sequence-parallel) path. Builds in /tmp/gb (Release,
# sm_90), runs test_ops_cuda's HGRU2 and long mixer-layer tests and
# test_lra_cuda, compute-sanitizer memcheck and racecheck over the HGRU2
# tests, then `hgrn bench --mixers` three ways: the default chunking,
# --hgru2-chunk 0 (never chunked: the recurrent walks alone) and chunks
# forced to 256 and 64 tokens at every shape (whether chunking pays where the
# default leaves it off). Logs in $OUT (logs.tgz) and a table.
set -u
source .offline-deps/unpack.sh >/dev/null
OUT=${OUT:-/tmp/hgru2_chunks_gpu}; mkdir -p "$OUT"; L=/tmp/h2c_logs; rm -rf $L; mkdir -p $L
B=/tmp/gb; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >$L/cmake.log 2>&1 &&
       cmake --build $B -j 32 >$L/build.log 2>&1; }; then tail -40 $L/build.log; exit 1; fi
echo "build $(el) s"
HGRN_TEST_FILTER=test_hgru2,test_mixer_layers timeout 200 $B/test_ops_cuda >$L/ops_hgru2.log 2>&1
echo "test_ops_cuda hgru2 + long layers rc=$? ($(el) s): $(grep -m1 'worst relative' $L/ops_hgru2.log)"
grep -E "FAIL|hgru2" $L/ops_hgru2.log | head -40
timeout 200 $B/test_lra_cuda >$L/lra.log 2>&1
echo "test_lra_cuda rc=$? ($(el) s): $(grep -m1 'worst relative' $L/lra.log)"
grep -E "FAIL|bf16 .*lra model step|left out" $L/lra.log | head -30
for tool in memcheck racecheck; do
  HGRN_TEST_FILTER=test_hgru2 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_ops_cuda >$L/san_$tool.log 2>&1
  echo "$tool hgru2 rc=$? ($(el) s): $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/san_$tool.log)"
done
for v in default 0 256 64; do
  if [ $v = default ]; then timeout 120 $B/hgrn bench --mixers >$L/mixers_$v.txt 2>&1
  else timeout 120 $B/hgrn bench --mixers --hgru2-chunk $v >$L/mixers_$v.txt 2>&1; fi
  echo "== bench --mixers, chunk $v (rc=$?, $(el) s)"; grep -E "^(mixer|hgru2|hgru1) " $L/mixers_$v.txt
done
tar czf $OUT/logs.tgz -C $L .
