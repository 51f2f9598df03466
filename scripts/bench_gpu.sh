#!/usr/bin/env bash
# On a GPU machine: build with CUDA, run the whole test suite (CUDA tests
# included), compute-sanitizer on the CUDA op tests, `hgrn bench` for the
# HGRN1 ImageNet configs (bf16 and fp32, batch 256, 224x224), and the
# Fashion-MNIST demo on the GPU. Logs go to $OUT (or /tmp/hgrn_gpu).
# usage: scripts/bench_gpu.sh [FASHION_MNIST_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/hgrn_gpu}
fm=${1:-/usr/share/datasets/fashion-mnist}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$out/cmake.log" 2>&1
cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
grep -E "warning" "$out/build.log" | head -5
(cd build-gpu && ctest --output-on-failure -j4 --timeout 900) >"$out/ctest.log" 2>&1
grep -E "tests passed|Failed|Passed|Skipped|\*\*\*" "$out/ctest.log" | tail -25
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 build-gpu/test_ops_cuda >"$out/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | tail -1))"
  done
fi
for cfg in hgrn1_deit_tiny hgrn1_deit_small; do
  build-gpu/hgrn bench --config configs/$cfg.cfg --batch 256 --steps 20 >"$out/bench_${cfg}_bf16.txt" 2>&1
  build-gpu/hgrn bench --config configs/$cfg.cfg --batch 256 --steps 10 --precision fp32 >"$out/bench_${cfg}_fp32.txt" 2>&1
done
if [ -d "$fm" ]; then
  start=$(date +%s.%N)
  build-gpu/hgrn train --config configs/fmnist_hgrn1_tiny.cfg --data "$fm" --out "$out/demo" >"$out/demo_train.log" 2>&1
  build-gpu/hgrn eval --ckpt "$out/demo/best.safetensors" --data "$fm" >"$out/demo_eval.log" 2>&1
  end=$(date +%s.%N)
  echo "GPU demo train+eval: $(awk "BEGIN{print $end - $start}") s: $(tail -1 "$out/demo_eval.log")"
fi
echo "== summary =="
for f in "$out"/bench_*.txt; do
  printf '%-36s %s | %s | %s\n' "$(basename "$f" .txt)" "$(grep '^train' "$f" | awk '{print $2" img/s train"}')" \
    "$(grep '^eval' "$f" | awk '{print $2" img/s eval"}')" "$(grep '^memory' "$f" | sed 's/memory *//')"
done
