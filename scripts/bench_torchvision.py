#!/usr/bin/env python3
"""bench_torchvision.py DIR [--images N] [--workers W] [--size S]

The reference for `hgrn bench-data`: images/s of PIL + torchvision/timm's
DeiT transforms on the same files, in one process (per-core figure) and
through a torch DataLoader with W worker processes (default: all cores).

Training transform: timm.data.create_transform(S, is_training=True,
auto_augment='rand-m9-mstd0.5-inc1', interpolation='bicubic', re_prob=0.25,
re_mode='pixel', re_count=1, color_jitter=0.4) - DeiT's arguments (DeiT
passes re_mode='pixel'; colour jitter is skipped by timm when auto_augment is
set). Evaluation: create_transform(S, is_training=False,
interpolation='bicubic', crop_pct=0.875). Images are read as torchvision's
ImageFolder does (PIL open + convert('RGB'))."""
import argparse
import os
import sys
import time


def list_images(d, limit):
    out = []
    for root, dirs, files in os.walk(d):
        dirs.sort()
        for f in sorted(files):
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                out.append(os.path.join(root, f))
    return out[:limit] if limit else out


def pil_loader(path):
    from PIL import Image
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


class Files:
    def __init__(self, files, n, tf):
        self.files, self.n, self.tf = files, n, tf

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.tf(pil_loader(self.files[i % len(self.files)])), 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()

    import torch
    import timm
    import torchvision
    import PIL
    from timm.data import create_transform

    torch.set_num_threads(1)
    files = list_images(a.dir, 0)
    if not files:
        print("bench_torchvision: no images under %s" % a.dir, file=sys.stderr)
        return 1
    n = max(a.images, len(files))
    train_tf = create_transform(a.size, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                                interpolation="bicubic", re_prob=0.25, re_mode="pixel", re_count=1,
                                color_jitter=0.4)
    eval_tf = create_transform(a.size, is_training=False, interpolation="bicubic", crop_pct=0.875)
    print("torchvision %s, timm %s, pillow %s, torch %s; %d files, %d images per run, %d cores"
          % (torchvision.__version__, timm.__version__, PIL.__version__, torch.__version__, len(files), n,
             os.cpu_count()))
    for name, tf in (("train", train_tf), ("eval", eval_tf)):
        for i in range(min(32, n)):   # warm-up
            tf(pil_loader(files[i % len(files)]))
        t0 = time.perf_counter()
        for i in range(n):
            tf(pil_loader(files[i % len(files)]))
        el = time.perf_counter() - t0
        print("torchvision %-5s 1 process : %8.1f img/s" % (name, n / el))
        dl = torch.utils.data.DataLoader(Files(files, n, tf), batch_size=a.batch, num_workers=a.workers,
                                         shuffle=False, drop_last=False)
        it = iter(dl)
        first = next(it)   # workers started and warm
        got, t0 = 0, time.perf_counter()
        for x, _ in it:
            got += x.shape[0]
        el = time.perf_counter() - t0
        print("torchvision %-5s DataLoader %d workers: %8.1f img/s" % (name, a.workers, got / el))
        del first, it, dl
    return 0


if __name__ == "__main__":
    sys.exit(main())
