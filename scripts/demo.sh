#!/usr/bin/env bash
# The Fashion-MNIST demo: installs packages, builds, trains HGRN1 on
# Fashion-MNIST, evaluates the best checkpoint, writes a test image as a JPEG
# and classifies it. Runs on the GPU when one is present, else on the CPU
# (pass --device cpu to force it). Extra arguments go to `hgrn train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=build bash scripts/build.sh
hgrn=build/hgrn
out=runs/fmnist_demo
start=$(date +%s)
$hgrn train --config configs/fmnist_hgrn1_tiny.cfg --out "$out" "$@"
$hgrn eval --ckpt "$out/best.safetensors" "$@"
end=$(date +%s)
echo "train + eval wall-clock: $((end - start)) s"
# one test image out as a JPEG file, then classified from that file
$hgrn prepare fmnist runs/fmnist_jpeg >/dev/null
img=$(ls runs/fmnist_jpeg/val/9_Ankle_boot/*.jpg | head -n 1)
echo "classifying $img (true class: Ankle boot)"
$hgrn classify --ckpt "$out/best.safetensors" "$img" "$@"
