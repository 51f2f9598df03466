#!/usr/bin/env bash
# Tries a few Fashion-MNIST demo recipes (on whatever device is present) and
# prints final top-1 and wall time for each, for choosing the demo recipe.
# usage: dev/sweep_fmnist.sh HGRN_BINARY FASHION_MNIST_DIR [extra args]
set -uo pipefail
hgrn=$1; fm=$2; shift 2
cfg=$(dirname "$0")/../configs/fmnist_hgrn1_tiny.cfg
out=${OUT:-/tmp/sweep}; mkdir -p "$out"
run() {
  local name=$1; shift
  local s=$(date +%s.%N)
  "$hgrn" train --config "$cfg" --data "$fm" --out "$out/$name" --train.log_every 1000 "$@" >"$out/$name.log" 2>&1
  local e=$(date +%s.%N)
  printf '%-14s %6.1f s  %s   (%s)\n' "$name" "$(awk "BEGIN{print $e - $s}")" \
    "$(grep -o 'best val top-1 [0-9.]*%' "$out/$name.log")" "$*"
}
run base8   --train.epochs 8 --train.warmup_epochs 0.5 "$@"
run noaug8  --train.epochs 8 --train.warmup_epochs 0.5 --data.crop_padding 0 --data.hflip 0 "$@"
run lr3e3   --train.epochs 8 --train.warmup_epochs 0.5 --train.lr 3e-3 "$@"
run ls0     --train.epochs 8 --train.warmup_epochs 0.5 --train.label_smoothing 0 "$@"
run flip    --train.epochs 8 --train.warmup_epochs 0.5 --data.crop_padding 0 "$@"
run b256    --train.epochs 8 --train.warmup_epochs 0.5 --train.batch_size 256 --train.lr 3e-3 "$@"
run d96e6   --train.epochs 6 --train.warmup_epochs 0.5 --model.dim 96 --model.glu_dim 192 "$@"
run base12  --train.epochs 12 --train.warmup_epochs 0.5 "$@"
