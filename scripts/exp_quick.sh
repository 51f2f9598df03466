source .offline-deps/unpack.sh >/dev/null
t0=$(date +%s)
(cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j16 --target test_ops_cuda >$OUT/build.log 2>&1) || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s)-t0 ))s"
HGRN_TEST_FILTER=test_hgru1 timeout 150 build-gpu/test_ops_cuda > $OUT/test.log 2>&1; echo "test rc=$? $(grep -cE 'FAIL' $OUT/test.log) fails"; grep -E "PASSED|FAILED" $OUT/test.log | head
for rep in 1 2; do
  HGRN_BENCH_ONLY=1 HGRN_BENCH_NOGEMM=1 timeout 100 build-gpu/test_ops_cuda 2>&1 | grep -E "copy|hgru1" | grep -vE "tt4|tt16"
done
echo "total $(( $(date +%s)-t0 ))s"
