#!/usr/bin/env bash
# gpu_jpeg_train.sh - training from JPEG files on a lent GPU machine (docs/PERFORMANCE.md,
# "Training from JPEG files"), from the repository root with OUT set (and
# FMNIST, the Fashion-MNIST folder, for the demo): builds build-gpu (Release, sm_90), runs test_gpu_input_auto,
# writes 4,096 photographs of ~40 KB and of ~110 KB (scripts/make_photos.py;
# the same files serve as train and val, all in the page cache), times
# `hgrn bench` of hgrn1_deit_tiny and _small, then `hgrn train` of each from
# each set for STEPS (1,000) steps at batch 256 (RUNS picks runs; a run can
# carry extra flags, e.g. "tiny p40 --data.input_sms auto"): img/s and data
# wait of the second half, host cores busy over the run, the epoch summary's
# GPU input split; then the GPU demo (SKIP_DEMO=1 leaves it out). About
# 9.5 minutes; one table in $OUT/summary.txt.
set -u
source .offline-deps/unpack.sh >/dev/null
[ -n "${FMNIST:-}" ] && { mkdir -p /usr/share/datasets; ln -sfn "$FMNIST" /usr/share/datasets/fashion-mnist; }
B=build-gpu; H=$B/hgrn; STEPS=${STEPS:-1000}; s=$(date +%s)
{ cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >$OUT/cmake.log 2>&1 && cmake --build $B -j 16 >$OUT/build.log 2>&1; } || { grep -E "error" $OUT/build.log | head -30; exit 1; }
row() { echo "$1|$2" | tee -a $OUT/summary.txt; }
: >$OUT/summary.txt
row "machine" "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nproc) cores; $(date -u +%F); build $(( $(date +%s)-s )) s"
if [ -z "${SKIP_TEST:-}" ]; then (cd $B && timeout 100 ./test_gpu_input_auto >$OUT/input_auto.log 2>&1; echo "test_gpu_input_auto rc=$?"; grep -E "HGRN_FAULT=|FAILED|PASSED" $OUT/input_auto.log | cut -c1-200); fi
D=/tmp/jp; mkdir -p $D
for kb in 40 110; do
  [ -d $D/p$kb/photos ] || { mkdir -p $D/p$kb; python3 scripts/make_photos.py $D/p$kb/photos 4096 --kb $kb >$OUT/photos$kb.log 2>&1 || { tail -5 $OUT/photos$kb.log; exit 1; }; ln -sfn photos $D/p$kb/train; ln -sfn photos $D/p$kb/val; }
  row "photos p$kb" "$(find -L $D/p$kb/train -type f | wc -l) files, $(du -sbL $D/p$kb/train | cut -f1) bytes (written just before: in the page cache)"
done
for m in tiny small; do
  timeout 60 $H bench --config configs/hgrn1_deit_$m.cfg --device cuda --batch 256 >$OUT/bench_$m.log 2>&1
  row "bench $m (synthetic)" "$(grep -E '^train ' $OUT/bench_$m.log)"
done
summ() { python3 - "$1" "$STEPS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"img_per_s"' in l]
half = [r for r in rows if r.get("step", 0) > int(sys.argv[2]) // 2]
if not half: print("no metrics"); sys.exit()
print("%.0f img/s over steps %d-%d, data wait %.1f %%" % (sum(r["img_per_s"] for r in half) / len(half), half[0]["step"], half[-1]["step"], 100 * sum(r["data_wait"] for r in half) / len(half)))
PY
}
IFS=, read -ra RL <<< "${RUNS:-tiny p40,tiny p110,small p40,small p110,tiny p40 --data.input_sms auto}"; for run in "${RL[@]}"; do
  set -- $run; extra="${*:3}"; t=$1_$2${3:+_x}; out=$D/run_$t; rm -rf $out
  /usr/bin/time -f "%e %U %S" -o $OUT/time_$t.txt timeout 150 $H train --config configs/hgrn1_deit_$1.cfg --device cuda --data $D/$2 --train.batch_size 256 --train.max_steps $STEPS --train.epochs 100000 --train.eval_every 1000000 --train.log_every 50 --model.num_classes 1000 $extra --out $out >$OUT/train_$t.log 2>&1
  read -r e u sy < $OUT/time_$t.txt
  row "train $1 from $2 $extra" "$(summ $out/metrics.jsonl); host cores busy $(python3 -c "print('%.1f' % (($u+$sy)/$e))") over the run ($e s wall)"
  grep -E "GPU input per batch|per batch:" $OUT/train_$t.log | tail -1 | cut -c1-400
  grep -E "input_sms|data.decode = auto" $OUT/train_$t.log | head -3 | cut -c1-300
done
if [ -z "${SKIP_DEMO:-}" ]; then
$H prepare fmnist /tmp/fj2 >/dev/null 2>&1; s=$(date +%s%N)
timeout 120 $H train --config configs/fmnist_hgrn1_tiny.cfg --data.dataset imagefolder --data /tmp/fj2 --out /tmp/demo --device cuda --train.epochs 20 --data.crop_padding 2 --data.hflip 0.5 >$OUT/demo.log 2>&1
row "demo (GPU, data.decode auto)" "rc=$? $(( ($(date +%s%N)-s)/1000000 )) ms; $(grep -m1 -E 'auto' $OUT/demo.log | cut -c1-200); $(grep -E 'top-1' $OUT/demo.log | tail -1 | cut -c1-120)"
fi
cat $OUT/summary.txt
