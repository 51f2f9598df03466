#!/usr/bin/env bash
# shards_gpu.sh - the tar-shard figures on a lent GPU machine (docs/DATA.md,
# "Tar shards"; docs/PERFORMANCE.md), from the repository root with OUT set.
# Two phases, each within a 10-minute call (the machine keeps /tmp between
# calls while it is warm); PHASE=prepare, then PHASE=train (default: both):
#   prepare: build (Release, sm_90) in /tmp/sb; 4,000 ImageNet-sized photos
#     (scripts/make_photos.py --kb 110) as an ImageFolder; `hgrn prepare
#     shards` with --max-side 0 and 384 on every core (files/s, bytes in and
#     out); `hgrn bench-data --loader` / `--decode gpu`, training transform,
#     over the files and over both shard sets.
#   train: `hgrn bench` (the synthetic rate) and 1,000 steps of `hgrn train`
#     of hgrn1_deit_tiny and hgrn1_deit_small (batch $BATCH, default 256)
#     from each shard set, and tiny from the 384 shards in stream mode; the
#     img/s of the last 500 steps and the share of time waiting for data
#     (MODELS=tiny / MODELS=small splits this phase into two calls).
# Ends with one table in $OUT/summary.txt; logs in $OUT.
set -u
source .offline-deps/unpack.sh >/dev/null
OUT=${OUT:-/tmp/shards_gpu}; mkdir -p "$OUT"
B=/tmp/sb; D=/tmp/shards_data; H=$B/hgrn
BATCH=${BATCH:-256}; STEPS=${STEPS:-1000}; NPHOTOS=${NPHOTOS:-4000}; MODELS=${MODELS:-tiny small}
PHASE=${PHASE:-all}
row() { echo "$1|$2" | tee -a "$OUT/summary.txt"; }

if [ "$PHASE" = prepare ] || [ "$PHASE" = all ]; then
  : >"$OUT/summary.txt"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
  echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" | tee -a "$OUT/summary.txt"
  if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 &&
         cmake --build $B -j "$(nproc)" --target hgrn >"$OUT/build.log" 2>&1; }; then tail -40 "$OUT/build.log"; exit 1; fi
  rm -rf $D; mkdir -p $D/src
  python3 scripts/make_photos.py $D/photos "$NPHOTOS" --kb 110 >"$OUT/photos.log" 2>&1 || { cat "$OUT/photos.log"; exit 1; }
  ln -s $D/photos $D/src/train; ln -s $D/photos $D/src/val   # the same files as both splits
  row "photos" "$(find -L $D/src/train -type f | wc -l) files, $(du -sbL $D/src/train | cut -f1) bytes"
  for m in 0 384; do
    /usr/bin/time -f "%e s wall, %U s user, %S s sys" "$H" prepare shards $D/src $D/s$m --max-side $m --quiet \
      >"$OUT/prepare_$m.log" 2>&1
    row "prepare --max-side $m" "$(grep '^train:' "$OUT/prepare_$m.log"); $(tail -1 "$OUT/prepare_$m.log")"
  done
  for src in "$D/src/train" "$D/s0" "$D/s384"; do
    for dec in cpu gpu; do
      if [ $dec = cpu ]; then args=(--loader); else args=(--decode gpu); fi
      log="$OUT/bench_data_$(basename "$src")_$dec.log"
      timeout 240 "$H" bench-data "$src" "${args[@]}" --only train --batch 256 --images 20480 >"$log" 2>&1
      row "bench-data $dec $(basename "$src")" "$(grep -E 'train loader' "$log" | tail -1)"
    done
  done
fi

if [ "$PHASE" = train ] || [ "$PHASE" = all ]; then
  for m in $MODELS; do
    cfg=configs/hgrn1_deit_$m.cfg
    timeout 120 "$H" bench --config $cfg --device cuda --batch "$BATCH" >"$OUT/bench_$m.log" 2>&1
    row "hgrn bench $m (synthetic)" "$(grep -E '^train ' "$OUT/bench_$m.log")"
    runs=("s384 random" "s0 random")
    [ $m = tiny ] && runs+=("s384 stream")
    for r in "${runs[@]}"; do
      set -- $r
      out=$D/run_${m}_$1_$2; rm -rf "$out"
      timeout 540 "$H" train --config $cfg --device cuda --data $D/$1 --data.shard_read "$2" \
        --train.batch_size "$BATCH" --train.max_steps "$STEPS" --train.epochs 100000 --train.eval_every 1000000 \
        --train.log_every 50 --model.num_classes 1000 --out "$out" >"$OUT/train_${m}_$1_$2.log" 2>&1
      # the second half of the steps: img/s and data wait from metrics.jsonl
      summary=$(python3 - "$out/metrics.jsonl" "$STEPS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"img_per_s"' in l]
half = [r for r in rows if r.get("step", 0) > int(sys.argv[2]) // 2]
if not half: print("no metrics"); sys.exit()
print("%.0f img/s over steps %d-%d, data wait %.1f %%" % (sum(r["img_per_s"] for r in half) / len(half),
      half[0]["step"], half[-1]["step"], 100 * sum(r["data_wait"] for r in half) / len(half)))
EOF
)
      row "train $m from $1 ($2)" "$summary"
    done
  done
fi
cat "$OUT/summary.txt"
