#!/usr/bin/env bash
# gpu_release_check.sh - on a lent GPU machine, from the repository root, with
# .offline-deps and a Fashion-MNIST copy (.gpu-fmnist/fashion-mnist) carried:
# build (Release, sm_90) in /tmp/gb, every GPU test verbosely, the rest of
# ctest (no slow label) on the GPU build, `hgrn bench` of the four official
# ImageNet recipes at their global batch on one GPU and at their per-GPU
# batch of an 8-GPU run, and the GPU demo's training time with
# data.decode auto, the ONNX export's parity on onnxruntime. PHASE=main does
# those, PHASE=rest (a second call while the machine is warm: /tmp/gb kept)
# runs the rest of ctest; the default runs both. One table at the end ($OUT/summary.txt); logs in
# $OUT/logs.tgz.
set -u
source .offline-deps/unpack.sh >/dev/null
mkdir -p /usr/share/datasets
[ -d /usr/share/datasets/fashion-mnist ] || ln -sfn "$PWD/.gpu-fmnist/fashion-mnist" /usr/share/datasets/fashion-mnist
OUT=${OUT:-/tmp/gpu_release_check}; mkdir -p "$OUT"; L=/tmp/grc_logs; rm -rf $L; mkdir -p $L
B=/tmp/gb; PHASE=${PHASE:-all}; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
rows=()
row() { rows+=("$1|$2|$3"); echo "$1: $2 ($3) at $(el) s"; }
GPU_TESTS="test_ops_cuda test_lra_cuda test_train_cuda test_gpu_images test_gpu_green test_gpu_green_fallback test_gpu_decode_auto test_backend_ops"
if [ $PHASE != rest ] || [ ! -x $B/hgrn ]; then
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >$L/cmake.log 2>&1 &&
       cmake --build $B -j 32 >$L/build.log 2>&1; }; then tail -40 $L/build.log; exit 1; fi
row build ok "$(el) s"
row "hgrn --version" "$($B/hgrn --version | tr '\n' ' ')" "-"
for t in $GPU_TESTS; do
  [ -x $B/$t ] || { row $t absent "-"; continue; }
  s=$(date +%s); timeout 300 $B/$t >$L/$t.log 2>&1; rc=$?
  row $t "rc=$rc" "$(( $(date +%s)-s )) s; $(grep -c '\[  FAILED  \]' $L/$t.log) failed"
  grep -E "\[  FAILED|^FAIL" $L/$t.log | head -10
done
fi
if [ $PHASE != rest ]; then
for spec in hgrn1_deit_tiny:2048 hgrn1_deit_small:2048 hgrn2_deit_tiny:1024 hgrn2_deit_small:2048 \
            hgrn1_deit_tiny:256 hgrn1_deit_small:256 hgrn2_deit_tiny:128 hgrn2_deit_small:256; do
  c=${spec%:*}; b=${spec#*:}
  timeout 150 $B/hgrn bench --config configs/$c.cfg --device cuda --batch $b --steps 20 >$L/bench_${c}_$b.txt 2>&1
  row "bench $c batch $b" "rc=$?" "$(grep -E '^(train|eval) ' $L/bench_${c}_$b.txt | tr '\n' ' ')"
done
# the README's demo on the GPU: the Fashion-MNIST JPEG tree, scripts/demo.sh's training command, decode auto
tree=/tmp/fmnist_jpeg
$B/hgrn prepare fmnist $tree >$L/prepare.log 2>&1 || row prepare "rc=$?" "$(tail -1 $L/prepare.log)"
rm -rf /tmp/grc_demo; s=$(date +%s%N)
timeout 200 $B/hgrn train --config configs/fmnist_hgrn1_tiny.cfg --data.dataset imagefolder --data $tree \
  --out /tmp/grc_demo --device cuda --train.epochs 20 --data.crop_padding 2 --data.hflip 0.5 >$L/demo.log 2>&1; rc=$?
w=$(( ($(date +%s%N) - s) / 1000000 ))
top=$(grep -o '"val_top1": *[0-9.]*' /tmp/grc_demo/metrics.jsonl 2>/dev/null | tail -1 | grep -o '[0-9.]*$')
row "demo train (decode auto)" "rc=$rc" "$w ms wall, last top-1 $top; $(grep -m1 'auto' $L/demo.log)"
timeout 60 $B/hgrn eval --ckpt /tmp/grc_demo/best.safetensors --device cuda >$L/demo_eval.log 2>&1
row "demo eval" "rc=$?" "$(grep -m1 'top-1' $L/demo_eval.log)"
s=$(date +%s); timeout 200 bash tests/test_onnx_export.sh $B/hgrn . >$L/onnx.log 2>&1; rc=$?
row "test_onnx_export.sh" "rc=$rc" "$(( $(date +%s)-s )) s; $(grep -m1 'parity on' $L/onnx.log)"
grep -iE "relative|FAIL" $L/onnx.log | head -14
fi
if [ $PHASE != main ]; then
s=$(date +%s)
(cd $B && timeout 330 ctest -j8 -LE slow -E "$(echo $GPU_TESTS | tr ' ' '|')" --timeout 300 --output-on-failure >$L/ctest.log 2>&1); rc=$?
row "ctest (the rest)" "rc=$rc" "$(( $(date +%s)-s )) s; $(grep 'tests passed' $L/ctest.log)"
grep -E "\*\*\*(Failed|Timeout|Exception)" $L/ctest.log | head -20
fi
echo; echo "step|result|detail"; printf '%s\n' "${rows[@]}" | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $L .
