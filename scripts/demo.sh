#!/usr/bin/env bash
# The Fashion-MNIST demo: installs packages, builds, trains HGRN1 on
# Fashion-MNIST, evaluates the best checkpoint, classifies a test image (a
# JPEG file) and plots the run's metrics (runs/fmnist_demo/metrics.png). Runs on the GPU when one is present, else on the CPU
# (pass --device cpu to force it). Extra arguments go to `hgrn train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=build bash scripts/build.sh
hgrn=build/hgrn
out=runs/fmnist_demo
tree=runs/fmnist_jpeg
# Fashion-MNIST as an ImageFolder tree of JPEG files; the demo trains from it
[ -d "$tree/val" ] || $hgrn prepare fmnist "$tree"
# The CPU recipe fits 10 minutes on 2 cores; a GPU trains 20 epochs with
# random crop + flip in seconds (docs/PERFORMANCE.md has both measured).
case " $* " in
  *" --device cuda "*) device=cuda ;;
  *" --device cpu "*) device=cpu ;;
  *) device=$($hgrn device) ;;
esac
extra=()
[ "$device" = cuda ] && extra=(--train.epochs 20 --data.crop_padding 2 --data.hflip 0.5)
start=$(date +%s)
$hgrn train --config configs/fmnist_hgrn1_tiny.cfg --data.dataset imagefolder --data "$tree" \
  --out "$out" --device "$device" "${extra[@]}" "$@"
$hgrn eval --ckpt "$out/best.safetensors" --device "$device" "$@"
end=$(date +%s)
echo "train + eval wall-clock: $((end - start)) s"
# one test image, a JPEG file of the tree, classified from that file
imgs=("$tree"/val/9_Ankle_boot/*.jpg)   # (not ls | head: SIGPIPE under pipefail)
img=${imgs[0]}
echo "classifying $img (true class: Ankle boot)"
$hgrn classify --ckpt "$out/best.safetensors" --device "$device" "$img" "$@"
$hgrn plot "$out"
