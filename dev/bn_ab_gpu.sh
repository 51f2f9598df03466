#!/usr/bin/env bash
# bn_ab_gpu.sh OLD_LRA_OPS - on a two-GPU machine: the HGRU2 LRA recipe (bf16,
# fmnist32) with the batch-norm kernels of this tree (GPU 0, the full
# 10-epoch schedule of scripts/bench_lra.sh) and with cuda/lra_ops.cu taken
# from the file OLD_LRA_OPS (an earlier cuda/lra_ops.cu; GPU 1, the first 1,400 steps: where this tree's run met a
# NaN gradient), then test_lra_cuda's bf16 model check with the old kernels,
# and the NCCL test on both GPUs. Logs in $OUT.
set -u
old=${1:?OLD_LRA_OPS}
t0=$(date +%s)
source .offline-deps/unpack.sh >/dev/null
ln -sfn /tmp/offline-deps/usr/share/datasets /usr/share/datasets
rm -rf /tmp/src_old && mkdir -p /tmp/src_old
cp -r CMakeLists.txt cuda src models data_loader tests configs /tmp/src_old/
cp "$old" /tmp/src_old/cuda/lra_ops.cu
build() { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake_$3.log" 2>&1 &&
          cmake --build "$2" -j 16 >"$OUT/build_$3.log" 2>&1 || { tail -20 "$OUT/build_$3.log"; exit 1; }; }
build . /tmp/gb new & p1=$!
build /tmp/src_old /tmp/gb_old old & p2=$!
wait $p1 $p2
echo "builds done at $(( $(date +%s) - t0 )) s"
R=/tmp/lra_runs
rm -rf $R/hgru2 $R/hgru2.*
CUDA_VISIBLE_DEVICES=0 HGRN=/tmp/gb/hgrn HGRN_DEADLINE=470 scripts/bench_lra.sh $R 10 hgru2 >"$OUT/q_hgru2_new.txt" 2>&1 & pq=$!
( export CUDA_VISIBLE_DEVICES=1
  rm -rf /tmp/h2old
  timeout 120 /tmp/gb_old/hgrn lra --mixer hgru2 --data fmnist32 --device cuda --out /tmp/h2old --train.epochs 10 \
    --train.warmup_epochs 1 --train.max_steps 1400 >"$OUT/hgru2_old.log" 2>&1
  echo "old kernels, hgru2 1400 steps: rc=$? $(grep -c 'is NaN' "$OUT/hgru2_old.log") NaN warnings; $(grep -E '^step 1400|val top-1' "$OUT/hgru2_old.log" | tail -2 | tr '\n' ' ')"
  timeout 200 /tmp/gb_old/test_lra_cuda >"$OUT/test_lra_cuda_old.log" 2>&1
  echo "old kernels test_lra_cuda rc=$?"; grep -E "bf16  hgru1 lra model step" "$OUT/test_lra_cuda_old.log"
  timeout 200 /tmp/gb/test_lra_cuda >"$OUT/test_lra_cuda_new.log" 2>&1
  echo "new kernels test_lra_cuda rc=$?"; grep -E "bf16  hgru1 lra model step" "$OUT/test_lra_cuda_new.log" ) 
( cd /tmp/gb && timeout 200 ctest -R test_comm_nccl --output-on-failure >"$OUT/nccl.log" 2>&1; echo "test_comm_nccl on 2 GPUs rc=$?"; grep -E "^ok|FAIL|tests passed" "$OUT/nccl.log" | head )
wait $pq
tail -5 "$OUT/q_hgru2_new.txt"; grep -c "is NaN" $R/hgru2.log; tail -2 $R/hgru2.log
cp $R/hgru2/metrics.jsonl "$OUT/hgru2_metrics.jsonl" 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
