#!/usr/bin/env bash
# Installs what hgrn needs to build, test and run its demo on Debian (as root),
# skipping packages that are already there. python3-torch runs the PyTorch
# parity test (scripts/pytorch/), python3-matplotlib the plots.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libcmocka-dev zlib1g-dev
      libjpeg62-turbo-dev libpng-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist
      python3-torch python3-matplotlib "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
