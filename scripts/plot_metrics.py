#!/usr/bin/env python3
"""plot_metrics.py RUN_DIR [OUT.png] - plots a run's metrics.jsonl (written by
`hgrn train`; `hgrn plot RUN_DIR` runs this) into one PNG, RUN_DIR/metrics.png
by default: four panels on one x axis, the optimizer step (epochs on a
second axis on top): training loss, learning rate, validation top-1 / top-5
(and loss on the right), training img/s (and the share of time spent waiting
for data on the right). A panel with nothing to draw yet says so ("no
evaluation yet"). The best top-1 is given in the validation panel's title and
marked on its curve, so no label sits on the data or the ticks.

Exit status: 0 written; 2 refused before any work (an output path that
cannot be written, no RUN_DIR/metrics.jsonl); 1 failure while working (a line
that is not JSON, matplotlib missing). Errors are one line on stderr. Needs
matplotlib (Debian: apt-get install python3-matplotlib, then run with
/usr/bin/python3)."""
import json
import os
import sys

from out_path import check_output

PROG = "plot_metrics.py"


def fail(code, msg):
    print(f"{PROG}: {msg}", file=sys.stderr)
    return code


def read_metrics(path):
    """(training records, validation records) in step order, the last record
    kept where a resumed run logged a step or an evaluation twice."""
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
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: not a JSON object")
            if "val_top1" in rec:
                val[(rec.get("step", -1), rec.get("epoch", -1))] = rec
            elif "loss" in rec and "step" in rec:
                train[rec["step"]] = rec
    return [train[k] for k in sorted(train)], [val[k] for k in sorted(val)]


def steps_per_epoch(train, val):
    """Optimizer steps per epoch, from a record that has both (None if none)."""
    for r in reversed(train + val):
        s, e = r.get("step"), r.get("epoch")
        if isinstance(s, (int, float)) and isinstance(e, (int, float)) and s > 0 and e > 0:
            return s / e
    return None


def val_step(r, spe):
    if "step" in r:
        return r["step"]
    return r["epoch"] * spe if spe else None


def empty(ax, note):
    """An empty panel that says why it is empty."""
    ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=12, color="0.45",
            bbox=dict(boxstyle="round,pad=0.6", fc="0.96", ec="0.8"))
    ax.set_yticks([])


def figure(name, train, val):
    """The four panels of a run's records (read_metrics) as a matplotlib
    figure titled name."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    spe = steps_per_epoch(train, val)
    fig, ax = plt.subplots(2, 2, figsize=(12, 7.5), sharex=True, layout="constrained")
    (a_loss, a_lr), (a_val, a_speed) = ax
    # one marker per point when there are too few points for a line to show
    style = dict(lw=1.2, marker="o" if len(train) < 3 else None, ms=4)
    steps = [r["step"] for r in train]
    if train:
        a_loss.plot(steps, [r["loss"] for r in train], color="tab:blue", **style)
        a_lr.plot(steps, [r["lr"] for r in train], color="tab:green", **style)
        # plain tick values: an offset text ("1e-3") would sit on the epoch axis
        a_lr.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.3g"))
        a_speed.plot(steps, [r["img_per_s"] for r in train], color="tab:purple", **style)
        a_speed.set_ylabel("img/s", color="tab:purple")
        if all("data_wait" in r for r in train):   # older runs have no data_wait
            w = a_speed.twinx()
            w.plot(steps, [100 * r["data_wait"] for r in train], color="0.5", **style)
            w.set_ylabel("% of time waiting for data", color="0.4")
            w.set_ylim(bottom=0)
    else:
        for a in (a_loss, a_lr, a_speed):
            empty(a, "no training record yet")
    a_loss.set_title("training loss (mean since the previous record)")
    a_lr.set_title("learning rate")
    a_speed.set_title("training throughput")

    vs = [val_step(r, spe) for r in val]
    val = [r for r, s in zip(val, vs) if s is not None]
    vs = [s for s in vs if s is not None]
    if val:
        vstyle = dict(ms=5, lw=1.2)
        a_val.plot(vs, [r["val_top1"] for r in val], "o-", color="tab:blue", label="top-1", **vstyle)
        a_val.plot(vs, [r["val_top5"] for r in val], "^-", color="tab:cyan", label="top-5", **vstyle)
        a_val.set_ylabel("accuracy %")
        handles = a_val.get_lines()
        if all("val_loss" in r for r in val):
            b = a_val.twinx()
            b.plot(vs, [r["val_loss"] for r in val], "s--", color="tab:red", label="loss (right)", **vstyle)
            b.set_ylabel("loss", color="tab:red")
            handles = handles + b.get_lines()
        i = max(range(len(val)), key=lambda k: val[k]["val_top1"])
        a_val.plot([vs[i]], [val[i]["val_top1"]], "*", ms=16, mfc="gold", mec="black", zorder=5)
        a_val.set_title(f"validation: best top-1 {val[i]['val_top1']:.2f} % (\u2605, epoch {val[i]['epoch']:g}, "
                        f"step {vs[i]:g})")
        # the legend under the panel, outside the data and the ticks
        a_val.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, frameon=False)
    else:
        empty(a_val, "no evaluation yet")
        a_val.set_title("validation")

    for a in ax.flat:
        a.grid(alpha=0.3)
    for a in ax.flat:   # the step under every panel, the shared axis read anywhere
        a.set_xlabel("step")
        a.tick_params(labelbottom=True)
    if spe:   # the epoch on a second axis over the top panels
        for a in (a_loss, a_lr):
            a.secondary_xaxis("top", functions=(lambda s: s / spe, lambda e: e * spe)).set_xlabel("epoch")
    if not train and not val:
        for a in ax.flat:
            a.set_xticks([])
    def count(n, what):
        return f"{n} {what}{'' if n == 1 else 's'}"
    summary = f"{count(len(train), 'training record')}, {count(len(val), 'evaluation')}"
    if not train and not val:
        summary = "nothing recorded yet"
    elif train:
        summary += f", step {steps[-1]}"
        if spe:
            summary += f" (epoch {steps[-1] / spe:.2f})"
    fig.suptitle(f"{name}: {summary}")
    return fig


def main(argv):
    if len(argv) < 2 or len(argv) > 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    run = argv[1].rstrip("/") or "/"
    out = argv[2] if len(argv) > 2 else os.path.join(run, "metrics.png")
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        why = "no such run directory" if not os.path.isdir(run) else "no such file"
        return fail(2, f"{path}: {why} (give the --out directory of hgrn train)")
    bad = check_output(out, "the PNG file")
    if bad:
        return fail(2, bad)
    try:
        train, val = read_metrics(path)
    except (OSError, ValueError) as e:
        return fail(1, str(e))
    try:
        import matplotlib
    except ImportError:
        return fail(1, f"matplotlib is not installed for {sys.executable} (Debian: apt-get install "
                       f"python3-matplotlib, and run with /usr/bin/python3)")
    matplotlib.use("Agg")
    fig = figure(os.path.basename(os.path.abspath(run)), train, val)
    # written beside the target and renamed over it: a failure leaves no
    # half-written picture
    tmp = os.path.join(os.path.dirname(out) or ".", f".{os.path.basename(out)}.tmp.{os.getpid()}.png")
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        return fail(1, f"{out}: {e.strerror}")
    if not val:
        print(f"{PROG}: {path}: no evaluation yet", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
