#!/usr/bin/env bash
# hgrn show-batch on the GPU input pipeline (data.decode gpu): the device
# batch copied back draws the same grid as the CPU pipeline's, for the
# training batch of step 0 (RandomResizedCrop, RandAugment, erasing, Mixup /
# CutMix) and for the evaluation transform, on a photo tree from
# scripts/make_photos.py. The pixels may differ a little (the CPU decodes
# training crops at a reduced DCT scale, nvJPEG's GPU-hybrid IDCT rounds
# differently): the mean difference must stay under 2 levels and fewer
# than 1 % of the values may differ by more than 32. Needs a GPU (skipped,
# 77, without one) and pillow, numpy, scikit-image; HGRN_TEST_KEEP=DIR keeps
# the four PNGs there to look at.
# usage: test_show_batch_gpu.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
[ "$("$hgrn" device 2>/dev/null)" = cuda ] || { echo "no GPU: skipped"; exit 77; }
# the first python3 that has what make_photos.py and the comparison need
# (Debian's on CI; on a GPU machine often a virtual environment's on PATH)
py=python3
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import numpy, PIL, skimage' 2>/dev/null; then py=$p; break; fi
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! { "$py" "$src/scripts/make_photos.py" "$tmp/photos/train" 64 && "$py" "$src/scripts/make_photos.py" "$tmp/photos/val" 32; } >"$tmp/mk.log" 2>&1; then
  echo "scripts/make_photos.py failed (pillow, numpy, scikit-image): skipped"; tail -n 2 "$tmp/mk.log"; exit 77
fi
printf '[model]\nimage_size = 96\npatch_size = 16\nnum_classes = 9\n[train]\nbatch_size = 32\nseed = 5\n[data]\ndataset = imagefolder\npath = %s/photos\n' "$tmp" >"$tmp/p.cfg"
fails=0
for mode in train eval; do
  extra=(); [ $mode = eval ] && extra=(--eval)
  for dec in cpu gpu; do
    if ! "$hgrn" show-batch --config "$tmp/p.cfg" --device cuda --data.decode $dec --count 16 "${extra[@]}" "$tmp/$mode-$dec.png" >"$tmp/$mode-$dec.log" 2>&1; then
      echo "FAIL $mode, data.decode $dec: $(tail -n 1 "$tmp/$mode-$dec.log")"; fails=$((fails + 1))
    fi
  done
  [ -n "${HGRN_TEST_KEEP:-}" ] && cp "$tmp/$mode-"*.png "$HGRN_TEST_KEEP/" 2>/dev/null
  "$py" - "$tmp/$mode-cpu.png" "$tmp/$mode-gpu.png" "$mode" <<'PY' || fails=$((fails + 1))
import sys
import numpy as np
from PIL import Image
a, b = (np.asarray(Image.open(p).convert("RGB")).astype(int) for p in sys.argv[1:3])
if a.shape != b.shape:
    print(f"FAIL {sys.argv[3]}: CPU grid {a.shape}, GPU grid {b.shape}")
    sys.exit(1)
d = np.abs(a - b)
mean, far = d.mean(), (d > 32).mean()
ok = mean < 2.0 and far < 0.01
print(f"{'ok  ' if ok else 'FAIL'} {sys.argv[3]}: GPU against CPU grid {a.shape[1]}x{a.shape[0]}: mean difference "
      f"{mean:.3f} levels, {100 * far:.3f} % of values more than 32 apart")
sys.exit(0 if ok else 1)
PY
done
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
