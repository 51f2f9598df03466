#!/usr/bin/env bash
# On a GPU machine: build with CUDA, run the whole test suite (CUDA tests
# included), compute-sanitizer on the CUDA tests, the kernel timings
# (`hgrn bench --ops`), `hgrn bench` for the ImageNet configs (bf16, batch 256,
# 224x224; fp32 too with FP32=1), and the Fashion-MNIST demo on the GPU. Logs
# go to $OUT (or /tmp/hgrn_gpu).
# usage: dev/bench_gpu.sh [FASHION_MNIST_DIR]
#   SAN_TIMEOUT=s  per sanitizer run (default 150; 0 skips the sanitizers)
#   CONFIGS="..."  which configs to bench (default: the four ImageNet ones)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-/tmp/hgrn_gpu}
fm=${1:-/usr/share/datasets/fashion-mnist}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$out/cmake.log" 2>&1
cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
grep -E "warning" "$out/build.log" | head -5
(cd build-gpu && ctest --output-on-failure -j4 --timeout 900) >"$out/ctest.log" 2>&1
grep -E "tests passed|Failed|Skipped|\*\*\*" "$out/ctest.log" | tail -25
build-gpu/test_train_cuda 2>&1 | grep -E "replayed|loss .* ->"
grep -E "worst relative error" "$out/ctest.log"
san=${SAN_TIMEOUT:-150}
if [ "$san" != 0 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    for t in test_ops_cuda test_train_cuda; do
      timeout "$san" compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/$t >"$out/san_${tool}_$t.log" 2>&1
      echo "compute-sanitizer $tool $t: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san_${tool}_$t.log" | tail -1))"
    done
  done
fi
build-gpu/hgrn bench --ops >"$out/ops.txt" 2>&1 || { echo "hgrn bench --ops failed:"; tail -5 "$out/ops.txt"; }
for cfg in ${CONFIGS:-hgrn1_deit_tiny hgrn1_deit_small hgrn2_deit_tiny hgrn2_deit_small}; do
  build-gpu/hgrn bench --config "configs/$cfg.cfg" --batch 256 --steps 20 >"$out/bench_${cfg}_bf16.txt" 2>&1
  [ "${FP32:-0}" = 1 ] && build-gpu/hgrn bench --config "configs/$cfg.cfg" --batch 256 --steps 10 --precision fp32 \
    >"$out/bench_${cfg}_fp32.txt" 2>&1
done
if [ -d "$fm" ]; then   # the GPU demo: scripts/demo.sh's GPU recipe, from the JPEG tree
  build-gpu/hgrn prepare fmnist "$out/fm_tree" --data "$fm" >"$out/demo_prepare.log" 2>&1
  start=$(date +%s.%N)
  build-gpu/hgrn train --config configs/fmnist_hgrn1_tiny.cfg --data.dataset imagefolder --data "$out/fm_tree" \
    --out "$out/demo" --device cuda --train.epochs 20 --data.crop_padding 2 --data.hflip 0.5 >"$out/demo_train.log" 2>&1
  build-gpu/hgrn eval --ckpt "$out/demo/best.safetensors" --device cuda >"$out/demo_eval.log" 2>&1
  end=$(date +%s.%N)
  echo "GPU demo train+eval: $(awk "BEGIN{print $end - $start}") s: $(tail -1 "$out/demo_eval.log")"
fi
echo "== summary =="
for f in "$out"/bench_*.txt; do
  printf '%-32s %s | %s | %s\n' "$(basename "$f" .txt)" "$(grep '^train ' "$f" | awk '{print $2" img/s train"}')" \
    "$(grep '^eval' "$f" | awk '{print $2" img/s eval"}')" "$(grep '^device mem' "$f" | awk '{print $3" GiB"}')"
done
