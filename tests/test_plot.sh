#!/usr/bin/env bash
# hgrn plot (scripts/plot_metrics.py): a PNG from a run's metrics.jsonl with
# training and validation records (a resumed run's repeated step included),
# and one-line errors for a missing run and a line that is not JSON. Needs
# matplotlib (Debian: python3-matplotlib, which scripts/deps.sh installs);
# exits 77 (skipped) without it.
# usage: test_plot.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1
py=/usr/bin/python3; [ -x "$py" ] || py=python3
if ! "$py" -c 'import matplotlib' >/dev/null 2>&1; then
  echo "matplotlib is not installed (apt-get install python3-matplotlib): skipped"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
mkdir -p "$tmp/run"
for s in 10 20 30 20 30 40; do   # a resume from step 10 logs 20 and 30 again
  printf '{"step": %d, "epoch": %s, "lr": 0.001, "loss": %s, "grad_norm": 1.5, "img_per_s": 1000.0, "data_wait": 0.02}\n' \
    "$s" "0.$s" "$(awk -v s="$s" 'BEGIN{print 3 - s / 20}')" >>"$tmp/run/metrics.jsonl"
done
printf '{"epoch": 1, "step": 20, "val_top1": 41.5, "val_top5": 88.0, "val_loss": 1.9, "eval_img_per_s": 3000.0}\n' >>"$tmp/run/metrics.jsonl"
printf '{"epoch": 2, "step": 40, "val_top1": 55.25, "val_top5": 93.0, "val_loss": 1.4, "eval_img_per_s": 3000.0}\n' >>"$tmp/run/metrics.jsonl"
if "$hgrn" plot "$tmp/run" >"$tmp/out" 2>&1 && [ "$(head -c 8 "$tmp/run/metrics.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
  echo "ok   plot: $(cat "$tmp/out") ($(stat -c %s "$tmp/run/metrics.png") bytes)"
else
  echo "FAIL plot:"; cat "$tmp/out"; fails=$((fails + 1))
fi
"$hgrn" plot "$tmp/run" "$tmp/other.png" >/dev/null 2>&1 && [ -s "$tmp/other.png" ] || { echo "FAIL plot OUT.png"; fails=$((fails + 1)); }
"$hgrn" plot "$tmp/none" >"$tmp/out" 2>&1 && { echo "FAIL missing run: exit 0"; fails=$((fails + 1)); }
grep -q "none/metrics.jsonl" "$tmp/out" && echo "ok   missing run: $(head -n 1 "$tmp/out")" || { echo "FAIL missing run:"; cat "$tmp/out"; fails=$((fails + 1)); }
mkdir -p "$tmp/bad"; printf '{"step": 1, "loss": 2}\n{"step": 2, oops\n' >"$tmp/bad/metrics.jsonl"
"$hgrn" plot "$tmp/bad" >"$tmp/out" 2>&1 && { echo "FAIL bad line: exit 0"; fails=$((fails + 1)); }
grep -q "metrics.jsonl:2: not JSON" "$tmp/out" && echo "ok   bad line: $(head -n 1 "$tmp/out")" || { echo "FAIL bad line:"; cat "$tmp/out"; fails=$((fails + 1)); }
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
