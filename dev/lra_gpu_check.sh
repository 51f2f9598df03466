#!/usr/bin/env bash
# lra_gpu_check.sh [FASHION_MNIST_DIR] - the LRA image task on one GPU, from
# the repository root after `source .offline-deps/unpack.sh` (CMocka,
# OpenBLAS): builds in /tmp/lb (Release, sm_90), runs the CUDA tests of the
# LRA ops and model (test_lra_cuda; test_train_cuda, whose graph replay now
# covers the LRA model; a quick test_ops_cuda pass over the shared test
# helpers), compute-sanitizer memcheck and racecheck over the batch-norm and
# grid-transpose kernels (test_lra_cuda) and over the op table
# (test_backend_ops: every op, those two and the residual among them), the
# per-op time of one LRA training step (hgrn bench), then bounded `hgrn lra`
# runs on Fashion-MNIST centred on 32x32 (--data fmnist32): HGRU1 with the
# recipe in bf16 and fp32, HGRU1 with the hgrn protocol (2-D scan, crop +
# flip), and the other four mixers, each
# evaluated on 2,000 test images; ends with one table. The runs shorten the
# schedule to one epoch with 2 % warm-up (the recipe's 10 of 100 epochs
# would leave the learning rate near zero for these few hundred steps). Bounded to about 8
# minutes (each step has a timeout; later steps are skipped past 450 s).
# Fashion-MNIST: FASHION_MNIST_DIR, else the first of data/fashion-mnist,
# /usr/share/datasets/fashion-mnist, /tmp/offline-deps/usr/share/datasets/
# fashion-mnist holding the IDX files. Logs in $OUT (default /tmp/lra_gpu_check).
set -u
t0=$(date +%s)
log=${OUT:-/tmp/lra_gpu_check}
mkdir -p "$log"
B=/tmp/lb
H=$B/hgrn
el() { echo $(( $(date +%s) - t0 )); }
late() { [ "$(el)" -gt 450 ] && { echo "skipped (past 450 s): $*"; return 0; }; return 1; }

fm=
for d in "${1:-}" data/fashion-mnist /usr/share/datasets/fashion-mnist /tmp/offline-deps/usr/share/datasets/fashion-mnist; do
  if [ -n "$d" ] && { [ -r "$d/train-images-idx3-ubyte.gz" ] || [ -r "$d/train-images-idx3-ubyte" ]; }; then fm=$d; break; fi
done

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1
if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$log/cmake.log" 2>&1 &&
       cmake --build $B -j 16 >"$log/build.log" 2>&1; }; then
  tail -30 "$log/cmake.log" "$log/build.log"; exit 1
fi
echo "build done at $(el) s"
[ "$($H device)" = cuda ] || { echo "hgrn device says '$($H device)': no CUDA backend or no GPU"; exit 1; }

# ---- tests ----
timeout 240 $B/test_lra_cuda >"$log/test_lra_cuda.log" 2>&1; rc_lra=$?
echo "test_lra_cuda rc=$rc_lra ($(el) s): $(grep -c ' ok$' "$log/test_lra_cuda.log") checks ok, $(grep -c 'FAIL' "$log/test_lra_cuda.log") FAIL"
grep -E "worst relative error|lra model eval|FAIL" "$log/test_lra_cuda.log" | head -20
if ! late test_train_cuda; then
  timeout 200 $B/test_train_cuda >"$log/test_train_cuda.log" 2>&1; rc_train=$?
  echo "test_train_cuda rc=$rc_train ($(el) s)"; grep -E "LRA model|replayed|FAIL|ERROR" "$log/test_train_cuda.log" | grep -E "LRA|FAIL|ERROR" | head -12
fi
if ! late test_ops_cuda; then
  HGRN_TEST_SCAN_QUICK=1 HGRN_TEST_FILTER=test_layernorm,test_ln_residual,test_scan,test_diag timeout 90 $B/test_ops_cuda \
    >"$log/test_ops_cuda.log" 2>&1
  echo "test_ops_cuda (quick, 4 op tests) rc=$? ($(el) s): $(grep 'worst relative' "$log/test_ops_cuda.log")"
fi
for tool in memcheck racecheck; do
  late "compute-sanitizer $tool" && continue
  HGRN_TEST_FILTER=test_batchnorm,test_grid_transpose timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/test_lra_cuda >"$log/san_$tool.log" 2>&1
  echo "$tool batchnorm + grid_transpose rc=$? ($(el) s): $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log/san_$tool.log")"
  late "compute-sanitizer $tool on the op table" && continue
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backend_ops >"$log/san_op_table_$tool.log" 2>&1
  echo "$tool op table (test_backend_ops) rc=$? ($(el) s): $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log/san_op_table_$tool.log")"
done

# ---- one LRA training step, op by op (random data, the recipe's shapes) ----
if ! late "hgrn bench"; then
  timeout 90 $H bench --config configs/lra_image_hgrn1.cfg --device cuda --steps 10 >"$log/bench_hgru1.txt" 2>&1
  echo "hgrn bench lra_image_hgrn1 rc=$? ($(el) s)"
  grep -E "^(train|eval|memory) " "$log/bench_hgru1.txt"
  grep -E "^(op |batchnorm|grid_transpose|hgru1|matmul|ln_gate|total)" "$log/bench_hgru1.txt" | head -12
fi

# ---- training runs ----
rows=()
run() {  # NAME STEPS ARGS...: hgrn lra for STEPS steps, then hgrn eval on 2,000 test images
  local name=$1 steps=$2; shift 2
  late "run $name" && { rows+=("$name|$steps|-|-|-|-|-|skipped"); return; }
  local dir="$log/run_$name" data=$fm
  [ "$fm" = /usr/share/datasets/fashion-mnist ] && data=fmnist32
  rm -rf "$dir"
  local s0; s0=$(date +%s%N)
  timeout 150 $H lra --device cuda --data "$data" --out "$dir" --train.max_steps "$steps" --train.log_every 25 \
    --train.epochs 1 --train.warmup_epochs 0.02 "$@" \
    >"$log/$name.log" 2>&1
  local rc=$? wall; wall=$(awk -v a="$s0" -v b="$(date +%s%N)" 'BEGIN{printf "%.0f", (b - a) / 1e9}')
  local ips loss top1="-" eips="-"
  ips=$(grep '^step ' "$log/$name.log" | grep -o '[0-9.]* img/s' | tail -1 | awk '{print $1}')
  loss=$(grep '^step ' "$log/$name.log" | grep -o 'loss [0-9.]*' | tail -1 | awk '{print $2}')
  if [ $rc = 0 ] && timeout 60 $H eval --ckpt "$dir/last.safetensors" --device cuda --data.val_limit 2000 --json \
       >"$log/$name.eval.json" 2>"$log/$name.eval.err"; then
    top1=$(grep -o '"top1": [0-9.]*' "$log/$name.eval.json" | head -1 | awk '{print $2}')   # then per class
    eips=$(grep -o '"img_per_s": [0-9.]*' "$log/$name.eval.json" | head -1 | awk '{print $2}')
  fi
  rows+=("$name|$steps|${ips:--}|$(awk -v i="${ips:-0}" 'BEGIN{printf (i > 0 ? "%.1f" : "-"), 50000 / (i > 0 ? i : 1)}')|${loss:--}|$top1|$eips|rc $rc, $wall s")
  echo "run $name rc=$rc ($(el) s): $(grep -E '^hgrn lra:' "$log/$name.log" | cut -c1-150)"
  [ $rc = 0 ] || tail -3 "$log/$name.log"
}
if [ -n "$fm" ]; then
  echo "Fashion-MNIST from $fm"
  run hgru1_lra_bf16 300 --mixer hgru1
  run hgru1_lra_fp32 60 --mixer hgru1 --precision fp32
  run hgru1_hgrn2d_bf16 150 --mixer hgru1 --protocol hgrn
  for m in hgru2 lru mingru minlstm; do run ${m}_lra_bf16 100 --mixer $m; done
else
  echo "no Fashion-MNIST IDX files found (give the directory as the first argument): training runs skipped"
fi

# ---- the table ----
echo
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); recipe d 512, 6 layers, batch 50, 1,024 pixels;"
echo "schedule of 1 epoch (2 % warm-up) cut at the steps shown; train img/s over the last 25 steps; s / 50k imgs: one CIFAR-sized epoch at that rate"
printf "%-20s %6s %10s %14s %8s %13s %10s  %s\n" run steps "train img/s" "s / 50k imgs" "loss" "top-1 (2000)" "eval img/s" "status"
for r in "${rows[@]}"; do
  IFS='|' read -r a b c d e f g h <<<"$r"
  printf "%-20s %6s %10s %14s %8s %13s %10s  %s\n" "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h"
done
echo "tests: test_lra_cuda rc=${rc_lra} test_train_cuda rc=${rc_train:-skipped}; total $(el) s; logs in $log"
