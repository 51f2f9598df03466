#!/usr/bin/env python3
"""plot_metrics.py RUN_DIR [OUT.png] - plots a run's metrics.jsonl (written by
`hgrn train`): training loss and learning rate against steps, validation top-1
and loss against epochs, throughput against steps. Needs matplotlib
(Debian: apt-get install python3-matplotlib, then run with /usr/bin/python3)."""
import json
import sys


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip())
        return 2
    run = sys.argv[1].rstrip("/")
    out = sys.argv[2] if len(sys.argv) > 2 else run + "/metrics.png"
    train, val = [], []
    with open(run + "/metrics.jsonl") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"{run}/metrics.jsonl:{n}: not JSON ({e})", file=sys.stderr)
                return 1
            (val if "val_top1" in rec else train).append(rec)
    if not train and not val:
        print(f"{run}/metrics.jsonl: no metrics yet", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    if train:
        steps = [r["step"] for r in train]
        ax[0][0].plot(steps, [r["loss"] for r in train], lw=1)
        ax[0][0].set(title="training loss", xlabel="step")
        ax[0][1].plot(steps, [r["lr"] for r in train], lw=1)
        ax[0][1].set(title="learning rate", xlabel="step")
        ax[1][1].plot(steps, [r["img_per_s"] for r in train], lw=1)
        ax[1][1].set(title="training img/s", xlabel="step")
        if all("data_wait" in r for r in train):   # older runs have no data_wait
            w = ax[1][1].twinx()
            w.plot(steps, [100 * r["data_wait"] for r in train], lw=1, color="tab:gray")
            w.set_ylabel("% of time waiting for data")
    if val:
        # a resumed run may log an epoch twice: keep the last record per epoch
        by_epoch = {r["epoch"]: r for r in val}
        ep = sorted(by_epoch)
        a = ax[1][0]
        a.plot(ep, [by_epoch[e]["val_top1"] for e in ep], "o-", label="top-1 %")
        a.set(title="validation", xlabel="epoch", ylabel="top-1 %")
        b = a.twinx()
        b.plot(ep, [by_epoch[e]["val_loss"] for e in ep], "s--", color="tab:red", label="loss")
        b.set_ylabel("loss")
        best = max(ep, key=lambda e: by_epoch[e]["val_top1"])
        a.annotate(f"best {by_epoch[best]['val_top1']:.2f}%", (best, by_epoch[best]["val_top1"]),
                   textcoords="offset points", xytext=(-60, -15))
    for a in ax.flat:
        a.grid(alpha=0.3)
    fig.suptitle(run)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
