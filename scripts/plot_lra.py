#!/usr/bin/env python3
"""plot_lra.py OUT_DIR [OUT.png] - the curves of scripts/bench_lra.sh's runs
side by side: one line per mixer (OUT_DIR/<mixer>/metrics.jsonl) for the
validation top-1 against epochs, the training loss against epochs and the
learning rate; OUT_DIR/lra_curves.png by default. Needs matplotlib (Debian:
apt-get install python3-matplotlib)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_metrics import read_metrics  # noqa: E402

MIXERS = ["hgru1", "hgru2", "lru", "mingru", "minlstm"]


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(root, "lra_curves.png")
    runs = []
    for m in MIXERS:
        path = os.path.join(root, m, "metrics.jsonl")
        if os.path.exists(path):
            try:
                runs.append((m, *read_metrics(path)))
            except (OSError, ValueError) as e:
                print(f"plot_lra.py: {e}", file=sys.stderr)
                return 1
    if not runs:
        print(f"plot_lra.py: {root}: no <mixer>/metrics.jsonl", file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_lra.py: matplotlib is not installed (apt-get install python3-matplotlib)", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for m, train, val in runs:
        if val:
            ax[0].plot([float(v["epoch"]) for v in val], [v["val_top1"] for v in val], marker="o", ms=3,
                       label=f"{m} (best {max(v['val_top1'] for v in val):.2f} %)")
        if train:
            ax[1].plot([t["epoch"] for t in train], [t["loss"] for t in train], lw=0.8, label=m)
            ax[2].plot([t["epoch"] for t in train], [t["lr"] for t in train], lw=1.0, label=m)
    ax[0].set(xlabel="epoch", ylabel="test top-1 (%)", title="validation top-1")
    ax[0].set_ylim(bottom=max(0, min(ax[0].get_ylim()[1] - 30, ax[0].get_ylim()[0])))
    ax[1].set(xlabel="epoch", ylabel="loss", title="training loss (mean over the log interval)")
    ax[1].set_yscale("log")
    ax[2].set(xlabel="epoch", ylabel="learning rate", title="learning rate")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
