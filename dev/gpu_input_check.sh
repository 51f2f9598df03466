#!/usr/bin/env bash
# gpu_input_check.sh [--bench-only] - on the GPU machine, from anywhere in
# the repository: build, run the GPU input pipeline's tests (test_gpu_images
# on the GPU, the host emulation tests, the CPU pipeline's pinned tests),
# compute-sanitizer memcheck on test_gpu_images, then `hgrn bench-data` with
# --decode cpu and --decode gpu on photographs from scripts/make_photos.py
# (~40 KB) and on its ImageNet-sized variant (~110 KB, --kb 110): the main
# table (CPU transforms, CPU loader, the GPU loader with the default
# settings, eval, the GPU-hybrid backend alone), a sweep of the GPU
# pipeline's settings (decode units, CPU share, a split with the GPU-hybrid
# decoder), the per-batch split of the default runs and a byte-for-byte
# check that the settings do not change the batches. Falls back to
# `hgrn bench-data --synth` files when python3 with pillow, numpy and
# scikit-image is not there. Logs go to $OUT (default /tmp/gpu_input_check),
# the photographs to $SETS (default /tmp/gpu_input_check_sets; reused when
# there). Aimed at < 7 minutes on an H100 host with 16 cores.
#   --bench-only  build only hgrn, skip the tests and the sanitizer (< 4 minutes)
#   PHOTOS=N      photographs in the ~40 KB set (default 2000; the 110 KB set gets N/2)
#   SAN_TIMEOUT=s compute-sanitizer's limit (default 150; 0 skips it)
#   BUILD=dir     build directory (default build-gpu-input)
set -uo pipefail
BENCH_ONLY=0
for a in "$@"; do
  case "$a" in
    --bench-only) BENCH_ONLY=1 ;;
    *) echo "usage: $0 [--bench-only]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpu_input_check}
SETS=${SETS:-/tmp/gpu_input_check_sets}
mkdir -p "$OUT" "$SETS"
B=${BUILD:-build-gpu-input}
NP=${PHOTOS:-2000}
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
# shellcheck source=/dev/null  # the lent machine's unpacked packages, absent elsewhere
if [ -f .offline-deps/unpack.sh ]; then source .offline-deps/unpack.sh >/dev/null; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (+ local changes)')"

# ---- build (only what this check runs) ----
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 \
  || { tail -20 "$OUT/cmake.log"; exit 1; }
grep -E "nvJPEG|CUDA toolkit" "$OUT/cmake.log" | sed 's/^-- //'
TARGETS="hgrn"
[ "$BENCH_ONLY" = 1 ] || TARGETS="hgrn test_gpu_images test_gpu_images_emul test_loader_gpu_emul test_augment test_loader test_config"
# shellcheck disable=SC2086
cmake --build "$B" -j"$(nproc)" --target $TARGETS >"$OUT/build.log" 2>&1 \
  || { grep -E "error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; }
echo "build done $(el)"
H=$B/hgrn

# ---- test data in the background (python or the synthetic fallback) ----
make_sets() {
  if python3 -c "import PIL, numpy, skimage" 2>/dev/null; then
    python3 scripts/make_photos.py "$SETS/photos" "$NP" >"$OUT/photos.log" 2>&1 &
    python3 scripts/make_photos.py "$SETS/photos110" $((NP / 2)) --kb 110 >"$OUT/photos110.log" 2>&1 &
    wait
    echo "photographs: make_photos.py ($(tail -1 "$OUT/photos.log" | sed 's/.*(//; s/)//'), $(tail -1 "$OUT/photos110.log" | sed 's/.*(//; s/)//'))"
  else
    "$H" bench-data --synth "$SETS/photos" "$NP" 500x375 --quality 90 >"$OUT/photos.log" 2>&1 &
    "$H" bench-data --synth "$SETS/photos110" $((NP / 2)) 768x576 --quality 95 >"$OUT/photos110.log" 2>&1 &
    wait
    echo "photographs: no python3 with pillow/numpy/scikit-image: synthetic photo-like JPEGs (bench-data --synth)"
  fi
}
if [ -f "$SETS/done-$NP" ] && [ -d "$SETS/photos" ] && [ -d "$SETS/photos110" ]; then
  cp "$SETS/sets.txt" "$OUT/sets.txt" 2>/dev/null
  echo "(reusing the photographs in $SETS)" >>"$OUT/sets.txt"
  SETS_PID=
else
  rm -rf "$SETS/photos" "$SETS/photos110" "$SETS"/done-*
  (make_sets >"$OUT/sets.txt" 2>&1 && cp "$OUT/sets.txt" "$SETS/sets.txt" && touch "$SETS/done-$NP") &
  SETS_PID=$!
fi

# ---- tests ----
if [ "$BENCH_ONLY" = 0 ]; then
  for t in test_gpu_images_emul test_loader_gpu_emul test_augment test_loader test_config; do
    OMP_NUM_THREADS=4 timeout 120 "$B/$t" >"$OUT/$t.log" 2>&1
    echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.log" | tr '\n' ' ')"
  done
  timeout 240 "$B/test_gpu_images" >"$OUT/test_gpu_images.log" 2>&1
  echo "test_gpu_images rc=$? $(grep -E '^\[  (PASSED|FAILED)|skipping' "$OUT/test_gpu_images.log" | tr '\n' ' ') ($(el))"
  grep -E "backend chosen|decode .*max|self-test|ops:|train batch|eval batch|loader (train|eval)|pipeline|loader_next_device|refuses|not on this GPU|ERROR|Failure" \
    "$OUT/test_gpu_images.log" | sed 's/^/  /' | head -50
  SAN=${SAN_TIMEOUT:-150}
  if [ "$SAN" != 0 ] && command -v compute-sanitizer >/dev/null; then
    HGRN_TEST_QUICK=1 timeout "$SAN" compute-sanitizer --tool memcheck --error-exitcode 9 "$B/test_gpu_images" \
      >"$OUT/san_memcheck.log" 2>&1
    echo "compute-sanitizer memcheck test_gpu_images: rc=$? $(grep -m1 'ERROR SUMMARY' "$OUT/san_memcheck.log") ($(el))"
  else
    echo "compute-sanitizer: skipped"
  fi
fi

# ---- benchmarks ----
[ -n "$SETS_PID" ] && wait "$SETS_PID"
cat "$OUT/sets.txt"
NT=$(nproc)
val() { grep -E "$1" "$2" 2>/dev/null | head -1 | awk '{for (i = 1; i <= NF; i++) if ($i == "img/s") { print $(i - 1); exit }}'; }
cores() { grep -E "$1" "$2" 2>/dev/null | head -1 | sed -n 's/.*CPU \([0-9.]*\) cores busy.*/\1/p'; }
njcores() { grep -E "$1" "$2" 2>/dev/null | head -1 | sed -n 's/.*(\([0-9.]*\) in nvJPEG calls).*/\1/p'; }
cell() { local v c; v=$(val '^gpu train loader' "$1"); c=$(cores '^gpu train loader' "$1"); echo "${v:--}/${c:--}"; }
gpu() {   # gpu NAME SET ARGS...: one `bench-data --decode gpu` run into $OUT/bench_SET_NAME.txt
  local name=$1 set=$2
  shift 2
  timeout 90 "$H" bench-data "$SETS/$set" --decode gpu --threads "$NT" "$@" >"$OUT/bench_${set}_${name}.txt" 2>&1
  echo "  $set $name rc=$?" >>"$OUT/rc.txt"
}
: >"$OUT/rc.txt"
SWEEP="u1 u2 u3 u4 u3s20 u3auto u3split80 hybrid"
for set in photos photos110; do
  D=$SETS/$set
  [ -d "$D" ] || { echo "$set: no files"; continue; }
  timeout 120 "$H" bench-data "$D" --threads "$NT" --images 2000 >"$OUT/bench_${set}_cpu.txt" 2>&1
  timeout 90 "$H" bench-data "$D" --decode cpu --loader --threads "$NT" --images 4096 --only train \
    >"$OUT/bench_${set}_cpuloader.txt" 2>&1
  # the defaults (data.jpeg_decoders 0 = 3 units, data.jpeg_cpu_share -1 = auto), train and eval, then the check
  # that the settings leave the batches as one nvJPEG-only unit makes them
  gpu default "$set" --images 10240 --verify 6
  # the sweep (train only): units with nvJPEG alone, a fixed and the auto CPU share, a split, the hybrid backend
  gpu u1 "$set" --only train --images 7680 --gpu-decoders 1 --cpu-share off
  gpu u2 "$set" --only train --images 7680 --gpu-decoders 2 --cpu-share off
  gpu u3 "$set" --only train --images 7680 --gpu-decoders 3 --cpu-share off
  gpu u4 "$set" --only train --images 7680 --gpu-decoders 4 --cpu-share off
  gpu u3s20 "$set" --only train --images 7680 --gpu-decoders 3 --cpu-share 0.2
  gpu u3auto "$set" --only train --images 7680 --gpu-decoders 3 --cpu-share auto
  gpu u3split80 "$set" --only train --images 7680 --gpu-decoders 3 --cpu-share off --hw-load 0.8
  gpu hybrid "$set" --only train --images 5120 --gpu-backend hybrid --gpu-decoders 3 --cpu-share off
  echo "  $set done ($(el))"
done
printf "\n%-10s %6s %6s | %10s %10s | %10s %6s %6s %10s | %10s | %10s %10s\n" set files KB "cpu xform" "cpu loader" \
  "gpu train" cores nvjpeg "gpu eval" "gpu hybrid" "cpu eval" "fallbacks"
for set in photos photos110; do
  [ -d "$SETS/$set" ] || continue
  G=$OUT/bench_${set}_default.txt
  files=$(grep -m1 -oE '^bench-data: [0-9]+ files' "$G" | awk '{print $2}')
  kb=$(grep -m1 -oE '\([0-9.]+ KB mean\)' "$G" | tr -d '(' | awk '{print $1}')
  fb=$(grep -E '^gpu train samples' "$G" | sed -n 's/.*, \([0-9]*\) CPU-decoded otherwise.*/\1/p')
  printf "%-10s %6s %6s | %10s %10s | %10s %6s %6s %10s | %10s | %10s %10s\n" "$set" "${files:--}" "${kb:--}" \
    "$(val "^train +[0-9]+ threads:" "$OUT/bench_${set}_cpu.txt")" \
    "$(val '^cpu train loader' "$OUT/bench_${set}_cpuloader.txt")" \
    "$(val '^gpu train loader' "$G")" "$(cores '^gpu train loader' "$G")" "$(njcores '^gpu train loader' "$G")" \
    "$(val '^gpu eval +loader' "$G")" \
    "$(val '^gpu train loader' "$OUT/bench_${set}_hybrid.txt")" \
    "$(val "^eval +[0-9]+ threads:" "$OUT/bench_${set}_cpu.txt")" "${fb:--}"
done
echo "(img/s; cpu xform: the CPU transforms on $NT threads; cpu loader: the CPU batch loader, batch 256; gpu: the"
echo " loader with nvJPEG + CUDA kernels, batch 256, default settings (3 decode units, auto CPU share), cores = CPU"
echo " cores the process kept busy, nvjpeg = of which inside nvJPEG's calls; gpu hybrid: nvJPEG's GPU-hybrid backend"
echo " alone, 3 units; fallbacks: samples the CPU decoded in the gpu train run for other reasons than the balance)"
printf "\nsweep, gpu train img/s / CPU cores busy:\n%-10s" set
for n in $SWEEP; do printf " %14s" "$n"; done
printf "\n"
for set in photos photos110; do
  [ -d "$SETS/$set" ] || continue
  printf "%-10s" "$set"
  for n in $SWEEP; do printf " %14s" "$(cell "$OUT/bench_${set}_${n}.txt")"; done
  printf "\n"
done
echo "(uN: N decode units, nvJPEG only; s20: 20% of each batch decoded by libjpeg-turbo on the loader threads;"
echo " auto: that share adapted to the measured balance; split80: 80% to the JPEG engines, 20% to the GPU-hybrid"
echo " decoder at the same time; hybrid: the GPU-hybrid backend alone)"
for set in photos photos110; do
  for n in default $SWEEP; do
    f=$OUT/bench_${set}_${n}.txt
    [ -f "$f" ] || continue
    grep -hE '^gpu (train|eval) +(loader|per batch|samples)|^verify' "$f" | sed "s/^/  $set $n: /"
    grep -hE '^nvJPEG:' "$f" | head -1 | sed "s/^/  $set $n: /"
    grep -hE '^bench-data:|error|failed|hgrn:' "$f" | grep -vE '^bench-data: [0-9]+ files' | sed "s/^/  $set $n: /"
  done
done
grep -v 'rc=0' "$OUT/rc.txt" | sed 's/^/nonzero exit:/'
echo "total $(el)"
