#!/usr/bin/env python3
"""plot_metrics.py RUN_DIR [OUT.png] - plots a run's metrics.jsonl (written by
`hgrn train`; `hgrn plot RUN_DIR` runs this) into one PNG, RUN_DIR/metrics.png
by default: training loss and learning rate against steps, validation top-1,
top-5 and loss against epochs, training img/s and the share of time spent
waiting for data against steps. Needs matplotlib (Debian: apt-get install
python3-matplotlib, then run with /usr/bin/python3)."""
import json
import os
import sys


def read_metrics(path):
    """(training records, validation records), the last record kept where a
    resumed run logged a step or an epoch twice."""
    train, val = {}, {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from None
            if "val_top1" in rec:
                val[rec["epoch"]] = rec
            elif "loss" in rec and "step" in rec:
                train[rec["step"]] = rec
    return [train[k] for k in sorted(train)], [val[k] for k in sorted(val)]


def main():
    if len(sys.argv) < 2 or len(sys.argv) > 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    run = sys.argv[1].rstrip("/")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(run, "metrics.png")
    path = os.path.join(run, "metrics.jsonl")
    try:
        train, val = read_metrics(path)
    except (OSError, ValueError) as e:
        print(f"plot_metrics.py: {e}", file=sys.stderr)
        return 1
    if not train and not val:
        print(f"plot_metrics.py: {path}: no metrics yet", file=sys.stderr)
        return 1
    try:
        import matplotlib
    except ImportError:
        print(f"plot_metrics.py: matplotlib is not installed for {sys.executable} (Debian: apt-get install "
              f"python3-matplotlib, and run with /usr/bin/python3)", file=sys.stderr)
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    if train:
        steps = [r["step"] for r in train]
        ax[0][0].plot(steps, [r["loss"] for r in train], lw=1)
        ax[0][0].set(title="training loss", xlabel="step")
        ax[0][1].plot(steps, [r["lr"] for r in train], lw=1)
        ax[0][1].set(title="learning rate", xlabel="step")
        ax[1][1].plot(steps, [r["img_per_s"] for r in train], lw=1, label="img/s")
        ax[1][1].set(title="training throughput", xlabel="step", ylabel="img/s")
        if all("data_wait" in r for r in train):   # older runs have no data_wait
            w = ax[1][1].twinx()
            w.plot(steps, [100 * r["data_wait"] for r in train], lw=1, color="tab:gray")
            w.set_ylabel("% of time waiting for data", color="tab:gray")
    if val:
        ep = [r["epoch"] for r in val]
        a = ax[1][0]
        a.plot(ep, [r["val_top1"] for r in val], "o-", label="top-1")
        a.plot(ep, [r["val_top5"] for r in val], "^-", label="top-5", alpha=0.7)
        a.set(title="validation", xlabel="epoch", ylabel="accuracy %")
        a.legend(loc="lower left")
        b = a.twinx()
        b.plot(ep, [r["val_loss"] for r in val], "s--", color="tab:red")
        b.set_ylabel("loss", color="tab:red")
        best = max(val, key=lambda r: r["val_top1"])
        a.annotate(f"best top-1 {best['val_top1']:.2f}%", (best["epoch"], best["val_top1"]),
                   textcoords="offset points", xytext=(-90, -18))
    for a in ax.flat:
        a.grid(alpha=0.3)
    fig.suptitle(os.path.basename(os.path.abspath(run)))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
