#!/usr/bin/env bash
# lra_figures_gpu.sh start|finish - on a lent machine with two GPUs, from the
# repository root: the GPU tests and the LRA image task's figures in two
# device calls of under 10 minutes each, made back to back (the second finds
# the first's build and runs in /tmp).
#   start:  builds /tmp/gb (Release, sm_90); GPU 1 starts the fmnist32 runs of
#           hgru1, lru, minlstm (scripts/bench_lra.sh, EPOCHS below) while GPU 0
#           runs ctest, test_preempt, the HGRU1 scan tests and the batch-norm
#           tests verbosely, hgrn bench (Tiny), bench --ops, bench --mixers, one
#           50,000-image CIFAR-format epoch of the hgru1 recipe, then the runs
#           of hgru2 and mingru; at DEADLINE every run is checkpointed (SIGTERM).
#   finish: resumes both queues to their end, then prints the table.
# Logs and the runs' metrics come back in $OUT (lra_runs.tgz).
set -u
phase=${1:?start or finish}
EPOCHS=${EPOCHS:-10}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
source .offline-deps/unpack.sh >/dev/null
ln -sfn /tmp/offline-deps/usr/share/datasets /usr/share/datasets
B=/tmp/gb
H=$B/hgrn
R=/tmp/lra_runs
mkdir -p "$R" "$OUT"
export HGRN=$H

if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 &&
       cmake --build $B -j 16 >"$OUT/build.log" 2>&1; }; then
  tail -30 "$OUT/cmake.log" "$OUT/build.log"; exit 1
fi
echo "build done at $(el) s; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | grep -c '^GPU')"
grep -E "cuDNN|nvJPEG|NCCL" "$OUT/cmake.log" | head -3

q1() { CUDA_VISIBLE_DEVICES=1 HGRN_DEADLINE=$1 scripts/bench_lra.sh $R "$EPOCHS" hgru1 lru minlstm >"$OUT/queue1_$phase.txt" 2>&1; }
q0() { CUDA_VISIBLE_DEVICES=0 HGRN_DEADLINE=$1 scripts/bench_lra.sh $R "$EPOCHS" hgru2 mingru >"$OUT/queue0_$phase.txt" 2>&1; }

if [ "$phase" = start ]; then
  deadline=$(( 545 - $(el) ))
  q1 $deadline & p1=$!
  export CUDA_VISIBLE_DEVICES=0
  # the three CUDA op/model tests and test_preempt run verbosely beside the rest of ctest
  (cd $B && timeout 280 ctest -j4 -LE slow -E 'test_preempt|test_ops_cuda|test_lra_cuda' --timeout 270 \
     >"$OUT/ctest.log" 2>&1; echo "ctest (the rest) rc=$?" >"$OUT/ctest.rc") & p_ct=$!
  timeout 280 $B/test_ops_cuda >"$OUT/test_ops_cuda.log" 2>&1 & p_ops=$!
  timeout 280 $B/test_lra_cuda >"$OUT/test_lra_cuda.log" 2>&1 & p_lra=$!
  timeout 280 $B/test_preempt >"$OUT/test_preempt.log" 2>&1; echo "test_preempt rc=$? ($(el) s)"
  grep -E "OK|FAIL|PASSED|skipped|gpu" "$OUT/test_preempt.log" | head -12
  wait $p_ops; echo "test_ops_cuda rc=$? ($(el) s)"
  grep -E "worst|FAIL|N2049|N4100|N5000|N16384|PASSED" "$OUT/test_ops_cuda.log" | head -24
  wait $p_lra; echo "test_lra_cuda rc=$? ($(el) s)"
  grep -E "worst|FAIL|cudnn|determin|PASSED" "$OUT/test_lra_cuda.log" | head -16
  wait $p_ct; cat "$OUT/ctest.rc"
  grep -E "tests passed|Failed|\*\*\*|Not Run|\(Skipped\)" "$OUT/ctest.log" | head -20
  timeout 60 $H bench --config configs/hgrn1_deit_tiny.cfg --device cuda --batch 256 --steps 20 >"$OUT/bench_tiny.txt" 2>&1
  echo "bench tiny rc=$?: $(grep -E '^train  ' "$OUT/bench_tiny.txt" | head -1)"
  timeout 60 $H bench --config configs/lra_image_hgrn1.cfg --device cuda --steps 10 >"$OUT/bench_lra_hgru1.txt" 2>&1
  echo "bench lra_image_hgrn1 rc=$?: $(grep -E '^train  ' "$OUT/bench_lra_hgru1.txt" | head -1)"
  grep -iE "^(batchnorm|hgru1|matmul|total)" "$OUT/bench_lra_hgru1.txt" | head -6
  timeout 120 $H bench --ops >"$OUT/bench_ops.txt" 2>&1; echo "bench --ops rc=$? ($(el) s)"
  grep -iE "^prec|copy|batchnorm|hgru1" "$OUT/bench_ops.txt" | head -16
  timeout 120 $H bench --mixers >"$OUT/bench_mixers.txt" 2>&1; echo "bench --mixers rc=$? ($(el) s)"
  grep -E "^(mixer|hgru1)" "$OUT/bench_mixers.txt"
  # one CIFAR-format epoch of 50,000 images (Fashion-MNIST written as CIFAR-10 batches)
  $H prepare cifar-like fmnist /tmp/fm_cifar >/dev/null 2>&1
  s0=$(date +%s.%N)
  rm -rf /tmp/cifar_epoch
  timeout 90 $H lra --mixer hgru1 --data /tmp/fm_cifar --device cuda --out /tmp/cifar_epoch \
    --train.epochs 1 --train.warmup_epochs 0.1 >"$OUT/cifar_epoch.log" 2>&1
  echo "one CIFAR-format epoch (hgru1 recipe) rc=$? wall $(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s: $(grep -E 'epoch 1 |top-1|hgrn lra' "$OUT/cifar_epoch.log" | tail -3 | tr '\n' ' ' | cut -c1-300)"
  left=$(( 545 - $(el) ))
  [ $left -gt 20 ] && q0 $left
  wait $p1
else
  q1 530 & p1=$!
  q0 530
  wait $p1
fi
echo "queue 1:"; tail -8 "$OUT/queue1_$phase.txt"
echo "queue 0:"; tail -7 "$OUT/queue0_$phase.txt"
tar czf "$OUT/lra_runs.tgz" --exclude='*.safetensors' -C /tmp lra_runs
echo "total $(el) s"
