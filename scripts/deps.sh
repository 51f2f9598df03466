#!/usr/bin/env bash
# Installs what hgrn needs to build, test and run its demo on Debian (as root),
# skipping packages that are already there; extra package names may be given
# as arguments. python3-torch runs the PyTorch parity test (scripts/pytorch/),
# python3-matplotlib the plots, python3-skimage the photo trees of
# scripts/make_photos.py (test_show_batch), python3-onnx `hgrn export onnx`
# (scripts/export_onnx.py, test_onnx_export), clang-format the style check
# (tests/test_format.sh). When another apt or dpkg process holds its
# lock (unattended upgrades, another build), this waits for it, up to
# HGRN_APT_WAIT seconds (default 600), instead of failing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libcmocka-dev zlib1g-dev
      libjpeg62-turbo-dev libpng-dev libarchive-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist
      python3-torch python3-matplotlib python3-skimage python3-onnx clang-format "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi

wait_s=${HGRN_APT_WAIT:-600}
# apt-get with its lock wait (apt >= 1.9.11 waits itself with DPkg::Lock::Timeout);
# a lock still held (older apt, or the lists lock) is retried every 5 s until
# wait_s has passed. Other failures are reported at once.
apt_get() {
  local start=$SECONDS log rc
  log=$(mktemp)
  while :; do
    rc=0
    apt-get -o DPkg::Lock::Timeout=60 "$@" >"$log" 2>&1 || rc=$?
    if [ $rc -eq 0 ]; then rm -f "$log"; return 0; fi
    if ! grep -qE "Could not get lock|Unable to acquire the dpkg|Unable to lock|is another process using it" "$log"; then
      cat "$log" >&2; rm -f "$log"; return $rc
    fi
    if [ $((SECONDS - start)) -ge "$wait_s" ]; then
      cat "$log" >&2
      echo "deps.sh: the apt/dpkg lock was still held after ${wait_s} s (HGRN_APT_WAIT); try again later" >&2
      rm -f "$log"; return $rc
    fi
    echo "deps.sh: another apt/dpkg process holds the lock; waiting ($((SECONDS - start)) s of ${wait_s} s)" >&2
    sleep 5
  done
}

echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}"
