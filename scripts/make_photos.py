#!/usr/bin/env python3
"""make_photos.py OUT [N] [--kb K] - build a directory of N (default 2000)
JPEG photographs of about 500x375 px at quality 90, as an ImageFolder tree
(OUT/<source>/<n>.jpg), from the real photographs bundled with scikit-image
(skimage.data: astronaut, coffee, chelsea, rocket, hubble, retina, ...):
random crops of random size and position at a 4:3 / 3:4 / 3:2 aspect,
resampled to the target size, random horizontal flips and mild exposure /
colour changes, so that every file is a distinct photograph-like JPEG.

--kb K: ImageNet-sized files instead (the GPU decoding benchmark's second
set): ImageNet-like shapes (mostly 500 px on the long side, some 640-1024),
and per file the lowest JPEG quality from 90 up (then a larger size, up to
2x) that reaches K KB, so the mean lands near K (ImageNet's training files
average about 110 KB; `--kb 110`).

Needs pillow, numpy and scikit-image (all present on the GPU machine).
Deterministic (seeded)."""
import os
import sys

import numpy as np
from PIL import Image, ImageEnhance

# Colour photographs bundled with scikit-image (no download needed), then a
# few that newer versions fetch on demand (skipped when that fails: the GPU
# machine has no network), then grayscale ones only if too few colour ones.
COLOUR = ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field",
          "retina", "skin", "lily"]
GRAY = ["camera", "moon", "coins", "grass", "gravel", "brick"]


def _call_with_timeout(fn, secs=10):
    import signal

    def handler(signum, frame):
        raise TimeoutError()
    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(secs)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def load_sources():
    from skimage import data
    imgs = []
    for names in (COLOUR, GRAY):
        if names is GRAY and len(imgs) >= 3:
            break
        for name in names:
            fn = getattr(data, name, None)
            if fn is None:
                continue
            try:
                a = _call_with_timeout(fn)
            except BaseException:   # needs a download (no network), timed out, or not an image
                continue
            a = np.asarray(a)
            if a.dtype != np.uint8:
                a = (255 * (a.astype(np.float64) / max(1e-9, float(a.max())))).astype(np.uint8)
            if a.ndim == 2:
                a = np.stack([a] * 3, axis=-1)
            if a.ndim != 3 or a.shape[2] < 3 or min(a.shape[:2]) < 256:
                continue
            imgs.append((name, Image.fromarray(np.ascontiguousarray(a[:, :, :3]))))
    return imgs


BICUBIC = getattr(getattr(Image, "Resampling", Image), "BICUBIC")
FLIP_LR = getattr(getattr(Image, "Transpose", Image), "FLIP_LEFT_RIGHT")


def encode_to_size(p, kb):
    """The lowest quality (90..100), then the smallest upscale, whose JPEG reaches kb KB."""
    import io
    base = p
    for scale in (1.0, 1.25, 1.5, 1.75, 2.0):
        if scale != 1.0:
            p = base.resize((int(base.size[0] * scale), int(base.size[1] * scale)), BICUBIC)
        for q in (90, 92, 94, 95, 96, 97, 98, 99, 100):
            buf = io.BytesIO()
            p.save(buf, format="JPEG", quality=q)
            if buf.tell() >= kb * 1024 or (scale == 2.0 and q == 100):
                return buf.getvalue()
    return buf.getvalue()


def main():
    args = [a for a in sys.argv[1:]]
    kb = None
    if "--kb" in args:
        i = args.index("--kb")
        kb = float(args[i + 1])
        del args[i:i + 2]
    if len(args) < 1:
        print(__doc__)
        return 2
    out = args[0]
    n = int(args[1]) if len(args) > 1 else 2000
    rng = np.random.default_rng(2024)
    srcs = load_sources()
    if not srcs:
        print("make_photos: no scikit-image sample photographs available", file=sys.stderr)
        return 1
    print("make_photos: %d source photographs: %s" % (len(srcs), ", ".join(s for s, _ in srcs)))
    shapes = [(500, 375)] * 7 + [(375, 500)] * 2 + [(500, 333)]
    if kb:   # ImageNet-like: mostly 500 on the long side, some larger
        shapes = [(500, 375)] * 5 + [(375, 500)] * 2 + [(500, 333)] * 2 + [(500, 500)] + [(640, 480)] * 2 + \
                 [(800, 600)] + [(1024, 768)]
    total = 0
    for i in range(n):
        name, im = srcs[i % len(srcs)]
        W, H = shapes[rng.integers(len(shapes))]
        sw, sh = im.size
        # the largest W:H box inside the source, then a random fraction of it
        fit = min(sw / W, sh / H)
        f = fit * rng.uniform(0.45, 1.0)
        cw, ch = max(16, int(W * f)), max(16, int(H * f))
        x = int(rng.integers(0, sw - cw + 1))
        y = int(rng.integers(0, sh - ch + 1))
        p = im.crop((x, y, x + cw, y + ch)).resize((W, H), BICUBIC)
        if rng.random() < 0.5:
            p = p.transpose(FLIP_LR)
        p = ImageEnhance.Brightness(p).enhance(float(rng.uniform(0.8, 1.2)))
        p = ImageEnhance.Color(p).enhance(float(rng.uniform(0.7, 1.3)))
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "%05d.jpg" % i)
        if kb:
            with open(path, "wb") as f:
                f.write(encode_to_size(p, kb))
        else:
            p.save(path, quality=90)
        total += os.path.getsize(path)
    print("make_photos: wrote %d JPEGs to %s (mean %.1f KB)" % (n, out, total / n / 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
