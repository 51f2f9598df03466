#!/usr/bin/env bash
# hgrn plot (scripts/plot_metrics.py):
# - a full run (training and validation records, a resumed run's repeated
#   steps): a 1200x750 PNG; drawn again through the script's figure(), every
#   panel's x axis is the step, the top panels carry the epoch on a second
#   axis, the best top-1 is in the validation panel's title, and no title,
#   axis label or legend overlaps another panel's data area or tick labels;
# - an empty run and a run with one record: a PNG whose empty panels say
#   "no evaluation yet" / "no training record yet";
# - refused before any work with exit 2 and one line, no traceback: an
#   output in a missing directory, a directory as the output, an output
#   where nothing can be written (/proc), a missing run; a line that is not
#   JSON is exit 1 with its line number;
# - `hgrn train --overwrite` removes the previous run's metrics.png (needs
#   Fashion-MNIST; that part is skipped without it).
# Needs matplotlib (Debian: python3-matplotlib, which scripts/deps.sh
# installs); exits 77 (skipped) without it.
# usage: test_plot.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
py=/usr/bin/python3; [ -x "$py" ] || py=python3
if ! "$py" -c 'import matplotlib' >/dev/null 2>&1; then
  echo "matplotlib is not installed (apt-get install python3-matplotlib): skipped"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
is_png() { [ "$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
png_size() { "$py" -c 'import struct,sys; d=open(sys.argv[1],"rb").read(24); print("%dx%d" % struct.unpack(">II", d[16:24]))' "$1"; }

# --- a full run: 6 training records (a resume from step 10 logs 20 and 30
# again), 2 evaluations
mkdir -p "$tmp/run"
for s in 10 20 30 20 30 40; do
  printf '{"step": %d, "epoch": %s, "lr": 0.001, "loss": %s, "grad_norm": 1.5, "img_per_s": 1000.0, "data_wait": 0.02}\n' \
    "$s" "$(awk -v s="$s" 'BEGIN{print s / 20}')" "$(awk -v s="$s" 'BEGIN{print 3 - s / 20}')" >>"$tmp/run/metrics.jsonl"
done
printf '{"epoch": 1, "step": 20, "val_top1": 41.5, "val_top5": 88.0, "val_loss": 1.9, "eval_img_per_s": 3000.0}\n' >>"$tmp/run/metrics.jsonl"
printf '{"epoch": 2, "step": 40, "val_top1": 55.25, "val_top5": 93.0, "val_loss": 1.4, "eval_img_per_s": 3000.0}\n' >>"$tmp/run/metrics.jsonl"
if "$hgrn" plot "$tmp/run" >"$tmp/out" 2>&1 && is_png "$tmp/run/metrics.png" && [ "$(png_size "$tmp/run/metrics.png")" = 1200x750 ]; then
  ok "full run: $(cat "$tmp/out") ($(png_size "$tmp/run/metrics.png"), $(stat -c %s "$tmp/run/metrics.png") bytes)"
else
  fail "full run:"; cat "$tmp/out"
fi
"$hgrn" plot "$tmp/run" "$tmp/other.png" >/dev/null 2>&1 && is_png "$tmp/other.png" && ok "plot RUN OUT.png" || fail "plot RUN OUT.png"

cat >"$tmp/layout.py" <<'PY'
import os
import sys
sys.path.insert(0, sys.argv[1])
import matplotlib
matplotlib.use("Agg")
import plot_metrics as pm

def check(run, want_notes):
    train, val = pm.read_metrics(run + "/metrics.jsonl")
    fig = pm.figure("t", train, val)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    axes = fig.axes[:4]   # the four panels (twins and secondary axes come after)
    problems = []
    texts = [t.get_text() for a in fig.axes for t in a.texts]
    for note in want_notes:
        if note not in texts:
            problems.append(f"no '{note}' note (texts: {texts})")
    if want_notes:
        return problems
    for i, a in enumerate(axes):
        if a.get_xlabel() != "step":
            problems.append(f"panel {i}: x axis '{a.get_xlabel()}', not step")
    tops = [sa for a in axes[:2] for sa in a.child_axes]
    if len(tops) != 2 or any(sa.get_xlabel() != "epoch" for sa in tops):
        problems.append("the top panels have no epoch axis")
    title = axes[2].get_title()
    if "best top-1 55.25 %" not in title:
        problems.append(f"validation title '{title}' lacks the best top-1")
    # every panel's data area and tick labels, against every other panel's
    # title, labels and legend, and against its own title and legend
    def boxes_of_ticks(a):
        return [t.get_window_extent(r) for t in a.get_xticklabels() + a.get_yticklabels() if t.get_text()]
    for i, a in enumerate(axes):
        # (with data in every panel, no free text belongs inside a panel either)
        own = [a.title, a.xaxis.label, a.yaxis.label] + ([a.get_legend()] if a.get_legend() else []) + list(a.texts)
        for j, b in enumerate(axes):
            data = b.get_window_extent(r)
            for art in own:
                bb = art.get_window_extent(r)
                if bb.width == 0:
                    continue
                if bb.overlaps(data):
                    problems.append(f"panel {i}'s {art.__class__.__name__} '{getattr(art, 'get_text', lambda: '')()}' "
                                    f"overlaps panel {j}'s data area")
                if j != i and any(bb.overlaps(t) for t in boxes_of_ticks(b)):
                    problems.append(f"panel {i}'s {art.__class__.__name__} overlaps panel {j}'s tick labels")
    return problems

# each argument RUN[=NOTE|NOTE...]: one matplotlib start for all of them
failed = 0
for spec in sys.argv[2:]:
    run, _, notes = spec.partition("=")
    p = check(run, [n for n in notes.split("|") if n])
    print(("FAIL " if p else "ok   ") + f"{os.path.basename(run)}: " + ("; ".join(p) if p else "layout ok"))
    failed += bool(p)
sys.exit(1 if failed else 0)
PY

# --- an empty run and a one-record run: notes in the empty panels
mkdir -p "$tmp/empty" "$tmp/one"
: >"$tmp/empty/metrics.jsonl"
head -n 1 "$tmp/run/metrics.jsonl" >"$tmp/one/metrics.jsonl"
for r in empty one; do
  if "$hgrn" plot "$tmp/$r" >"$tmp/out" 2>"$tmp/err" && is_png "$tmp/$r/metrics.png" && grep -q "no evaluation yet" "$tmp/err"; then
    ok "$r run: a PNG, and on stderr: $(cat "$tmp/err")"
  else
    fail "$r run:"; cat "$tmp/out" "$tmp/err"
  fi
done
# the layout, from the figures the script draws: the full run (one x axis,
# epochs on top, best top-1 in the title, nothing overlaps) and the notes of
# the empty and one-record runs
"$py" "$tmp/layout.py" "$src/scripts" "$tmp/run" "$tmp/empty=no evaluation yet|no training record yet" \
  "$tmp/one=no evaluation yet" >"$tmp/layout.out" 2>&1
cat "$tmp/layout.out"
fails=$((fails + $(grep -c '^FAIL' "$tmp/layout.out")))
grep -q '^ok   ' "$tmp/layout.out" || { echo "FAIL layout check did not run"; fails=$((fails + 1)); }

# --- refused before any work: exit 2, one line, no traceback, nothing written
refused() {  # refused NAME PATTERN ARGS...
  local name=$1 pat=$2; shift 2
  "$hgrn" plot "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && ! grep -q Traceback "$tmp/err" && grep -q -- "$pat" "$tmp/err"; then
    ok "$name: exit 2: $(cat "$tmp/err")"
  else
    fail "$name: exit $rc:"; cat "$tmp/err"
  fi
}
touch "$tmp/afile"
refused "missing output directory" "does not exist" "$tmp/run" "$tmp/nodir/x.png"
refused "output under a file" "is not a directory" "$tmp/run" "$tmp/afile/x.png"
refused "output is a directory" "is a directory" "$tmp/run" "$tmp"
refused "unwritable output (/proc)" "cannot write in /proc" "$tmp/run" /proc/hgrn_plot_test.png
refused "missing run" "none/metrics.jsonl" "$tmp/none"
refused "no arguments" "RUN_DIR is required"
refused "unknown option" "unknown option --dpi" "$tmp/run" --dpi 300
[ -e "$tmp/nodir" ] && fail "a refused plot created $tmp/nodir"

# --- a line that is not JSON: exit 1, named by its line
mkdir -p "$tmp/bad"; printf '{"step": 1, "loss": 2}\n{"step": 2, oops\n' >"$tmp/bad/metrics.jsonl"
"$hgrn" plot "$tmp/bad" >"$tmp/out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "metrics.jsonl:2: not JSON" "$tmp/out" && ! grep -q Traceback "$tmp/out" &&
  ok "bad line: exit 1: $(head -n 1 "$tmp/out")" || { fail "bad line: exit $rc:"; cat "$tmp/out"; }

# --- `hgrn train --overwrite` takes the previous run's picture away
if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  tiny=(--config "$src/configs/fmnist_hgrn1_tiny.cfg" --device cpu --threads 2 --model.dim 16 --model.depth 1
        --model.glu_dim 32 --train.batch_size 32 --data.train_limit 64 --data.val_limit 64 --train.epochs 1
        --train.log_every 1 --out "$tmp/tr")
  if "$hgrn" train "${tiny[@]}" >"$tmp/tr.log" 2>&1 && "$hgrn" plot "$tmp/tr" >/dev/null 2>&1 && [ -f "$tmp/tr/metrics.png" ]; then
    "$hgrn" train "${tiny[@]}" --train.max_steps 1 --overwrite >"$tmp/tr2.log" 2>&1
    [ ! -e "$tmp/tr/metrics.png" ] && [ -f "$tmp/tr/metrics.jsonl" ] && ok "train --overwrite removed the old metrics.png" ||
      fail "train --overwrite left metrics.png behind ($(tail -n 1 "$tmp/tr2.log"))"
  else
    fail "tiny training run:"; tail -n 3 "$tmp/tr.log"
  fi
else
  echo "skip train --overwrite: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
fi
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
