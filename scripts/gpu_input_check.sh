#!/usr/bin/env bash
# gpu_input_check.sh - on the GPU machine, from anywhere in the repository:
# build, run the GPU input pipeline's tests (test_gpu_images on the GPU, the
# host emulation tests, the CPU pipeline's pinned tests), compute-sanitizer
# memcheck on test_gpu_images, then `hgrn bench-data` with --decode cpu and
# --decode gpu (nvJPEG hardware and hybrid backends) on photographs from
# scripts/make_photos.py (~40 KB) and on its ImageNet-sized variant (~110 KB,
# --kb 110), printing a short table. Falls back to `hgrn bench-data --synth`
# files when python3 with pillow, numpy and scikit-image is not there.
# Logs and data go to $OUT (default /tmp/gpu_input_check). Aimed at < 6
# minutes on an H100 host with 16 cores.
#   PHOTOS=N      photographs in the ~40 KB set (default 2000; the 110 KB set gets N/2)
#   SAN_TIMEOUT=s compute-sanitizer's limit (default 150; 0 skips it)
#   BUILD=dir     build directory (default build-gpu-input)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpu_input_check}
mkdir -p "$OUT"
B=${BUILD:-build-gpu-input}
NP=${PHOTOS:-2000}
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
if [ -f .offline-deps/unpack.sh ]; then source .offline-deps/unpack.sh >/dev/null; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

# ---- build (only what this check runs) ----
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 \
  || { tail -20 "$OUT/cmake.log"; exit 1; }
grep -E "nvJPEG|CUDA toolkit" "$OUT/cmake.log" | sed 's/^-- //'
cmake --build "$B" -j"$(nproc)" --target hgrn test_gpu_images test_gpu_images_emul test_loader_gpu_emul \
  test_augment test_loader test_config >"$OUT/build.log" 2>&1 \
  || { grep -E "error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; }
echo "build done $(el)"
H=$B/hgrn

# ---- test data in the background (python or the synthetic fallback) ----
make_sets() {
  if python3 -c "import PIL, numpy, skimage" 2>/dev/null; then
    python3 scripts/make_photos.py "$OUT/photos" "$NP" >"$OUT/photos.log" 2>&1 &
    python3 scripts/make_photos.py "$OUT/photos110" $((NP / 2)) --kb 110 >"$OUT/photos110.log" 2>&1 &
    wait
    echo "photographs: make_photos.py ($(tail -1 "$OUT/photos.log" | sed 's/.*(//; s/)//'), $(tail -1 "$OUT/photos110.log" | sed 's/.*(//; s/)//'))"
  else
    "$H" bench-data --synth "$OUT/photos" "$NP" 500x375 --quality 90 >"$OUT/photos.log" 2>&1 &
    "$H" bench-data --synth "$OUT/photos110" $((NP / 2)) 768x576 --quality 95 >"$OUT/photos110.log" 2>&1 &
    wait
    echo "photographs: no python3 with pillow/numpy/scikit-image: synthetic photo-like JPEGs (bench-data --synth)"
  fi
}
rm -rf "$OUT/photos" "$OUT/photos110"
make_sets >"$OUT/sets.txt" 2>&1 &
SETS_PID=$!

# ---- tests ----
for t in test_gpu_images_emul test_loader_gpu_emul test_augment test_loader test_config; do
  OMP_NUM_THREADS=4 timeout 120 "$B/$t" >"$OUT/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.log" | tr '\n' ' ')"
done
timeout 240 "$B/test_gpu_images" >"$OUT/test_gpu_images.log" 2>&1
echo "test_gpu_images rc=$? $(grep -E '^\[  (PASSED|FAILED)|skipping' "$OUT/test_gpu_images.log" | tr '\n' ' ') ($(el))"
grep -E "backend chosen|decode .*max|ops:|train batch|eval batch|loader (train|eval)|loader_next_device|refuses|not on this GPU|ERROR|Failure" \
  "$OUT/test_gpu_images.log" | sed 's/^/  /' | head -40
SAN=${SAN_TIMEOUT:-150}
if [ "$SAN" != 0 ] && command -v compute-sanitizer >/dev/null; then
  HGRN_TEST_QUICK=1 timeout "$SAN" compute-sanitizer --tool memcheck --error-exitcode 9 "$B/test_gpu_images" \
    >"$OUT/san_memcheck.log" 2>&1
  echo "compute-sanitizer memcheck test_gpu_images: rc=$? $(grep -m1 'ERROR SUMMARY' "$OUT/san_memcheck.log") ($(el))"
else
  echo "compute-sanitizer: skipped"
fi

# ---- benchmarks ----
wait $SETS_PID
cat "$OUT/sets.txt"
NT=$(nproc)
val() { grep -E "$1" "$2" 2>/dev/null | head -1 | awk '{for (i = 1; i <= NF; i++) if ($i == "img/s") { print $(i - 1); exit }}'; }
cores() { grep -E "$1" "$2" 2>/dev/null | head -1 | sed -n 's/.*CPU \([0-9.]*\) cores busy.*/\1/p'; }
printf "\n%-10s %6s %6s | %10s %10s | %10s %6s %10s | %10s | %10s %10s\n" set files KB "cpu xform" "cpu loader" \
  "gpu train" cores "gpu eval" "gpu hybrid" "cpu eval" "fallbacks"
for set in photos photos110; do
  D=$OUT/$set
  [ -d "$D" ] || { echo "$set: no files"; continue; }
  timeout 120 "$H" bench-data "$D" --threads "$NT" --images 2000 >"$OUT/bench_${set}_cpu.txt" 2>&1
  timeout 90 "$H" bench-data "$D" --decode cpu --loader --threads "$NT" --images 4096 --only train \
    >"$OUT/bench_${set}_cpuloader.txt" 2>&1
  timeout 90 "$H" bench-data "$D" --decode gpu --threads "$NT" --images 10240 >"$OUT/bench_${set}_gpu.txt" 2>&1
  echo "  $set gpu rc=$?" >>"$OUT/rc.txt"
  timeout 90 "$H" bench-data "$D" --decode gpu --gpu-backend hybrid --threads "$NT" --images 5120 --only train \
    >"$OUT/bench_${set}_gpuhybrid.txt" 2>&1
  files=$(grep -m1 -oE '^bench-data: [0-9]+ files' "$OUT/bench_${set}_gpu.txt" | awk '{print $2}')
  kb=$(grep -m1 -oE '\([0-9.]+ KB mean\)' "$OUT/bench_${set}_gpu.txt" | tr -d '(' | awk '{print $1}')
  fb=$(grep -E '^gpu train samples' "$OUT/bench_${set}_gpu.txt" | sed -n 's/.*, \([0-9]*\) CPU-decoded.*/\1/p')
  printf "%-10s %6s %6s | %10s %10s | %10s %6s %10s | %10s | %10s %10s\n" "$set" "${files:--}" "${kb:--}" \
    "$(val "^train +[0-9]+ threads:" "$OUT/bench_${set}_cpu.txt")" \
    "$(val '^cpu train loader' "$OUT/bench_${set}_cpuloader.txt")" \
    "$(val '^gpu train loader' "$OUT/bench_${set}_gpu.txt")" "$(cores '^gpu train loader' "$OUT/bench_${set}_gpu.txt")" \
    "$(val '^gpu eval +loader' "$OUT/bench_${set}_gpu.txt")" \
    "$(val '^gpu train loader' "$OUT/bench_${set}_gpuhybrid.txt")" \
    "$(val "^eval +[0-9]+ threads:" "$OUT/bench_${set}_cpu.txt")" "${fb:--}"
done
echo "(img/s; cpu xform: the CPU transforms on $NT threads; cpu loader: the CPU batch loader, batch 256; gpu: the"
echo " loader with nvJPEG + CUDA kernels, batch 256, default backend, cores = CPU cores the process kept busy;"
echo " gpu hybrid: nvJPEG's GPU-hybrid backend; fallbacks: samples the CPU decoded in the gpu train run)"
for set in photos photos110; do
  grep -hE '^gpu (train|eval) +(per batch|samples)|^gpu (train|eval) +loader' "$OUT/bench_${set}_gpu.txt" \
    "$OUT/bench_${set}_gpuhybrid.txt" 2>/dev/null | sed "s/^/  $set: /"
  grep -hE '^bench-data:|error|failed' "$OUT/bench_${set}_gpu.txt" 2>/dev/null | grep -vE '^bench-data: [0-9]+ files' | sed "s/^/  $set: /"
done
echo "total $(el)"
