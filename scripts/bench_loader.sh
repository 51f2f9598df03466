#!/usr/bin/env bash
# scripts/bench_loader.sh DIR [THREADS] [IMAGES]
# Images/s of hgrn's DeiT training and evaluation transforms on the photos
# under DIR (hgrn bench-data: 1 thread and THREADS threads, default all
# cores, with the decode / resize / augmentation split), then - when python3
# with torch, torchvision, timm and pillow is available (the GPU machine) -
# the same transforms with PIL + torchvision/timm on the same files
# (scripts/bench_torchvision.py), one process and a DataLoader with THREADS
# workers.
# Without a DIR of photos, make one first: python3 scripts/make_photos.py DIR
# (scikit-image's sample photographs), or: hgrn bench-data --synth DIR 2000.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:?usage: scripts/bench_loader.sh DIR [THREADS] [IMAGES]}"
threads="${2:-$(nproc)}"
images="${3:-2000}"

hgrn="${HGRN:-$root/build/hgrn}"
run_bench() {
    if [ ! -x "$hgrn" ]; then echo "bench_loader.sh: build hgrn first (scripts/build.sh), or set HGRN" >&2; exit 1; fi
    "$hgrn" bench-data "$@"
}

echo "== hgrn bench-data ($(date -u +%F), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
run_bench "$dir" --threads "$threads" --images "$images"

if python3 -c "import torch, torchvision, timm, PIL" >/dev/null 2>&1; then
    echo "== PIL + torchvision/timm on the same files"
    python3 "$root/scripts/bench_torchvision.py" "$dir" --images "$images" --workers "$threads"
else
    echo "== PIL + torchvision comparison skipped (python3 with torch, torchvision, timm, pillow not found)"
fi
