#!/usr/bin/env bash
# scripts/bench_lra.sh end to end on the CPU with a tiny model (d 8, one
# layer, a few hundred steps of fmnist32): the table names every run done
# with a top-1; HGRN_DEADLINE interrupts a run with SIGTERM, which leaves a
# checkpoint (status "interrupted", exit 75) that the next call resumes to
# the end, every training record once; a bad EPOCHS is refused; and
# scripts/plot_lra.py draws the runs (where matplotlib is installed).
# Fashion-MNIST is needed (exit 77 otherwise).
# usage: test_bench_lra.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1 src=$2
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte ] ||
  { echo "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
export HGRN=$hgrn HGRN_GPUS=0
tiny="--device cpu --threads 2 --model.dim 8 --model.glu_dim 8 --model.depth 1 --data.val_limit 200"
bench() { "$src/scripts/bench_lra.sh" "$@"; }

# ---- two runs to their end ----
HGRN_LRA_ARGS="$tiny --train.max_steps 30" bench "$tmp/a" 1 hgru1 mingru >"$tmp/a.out" 2>&1; rc=$?
for m in hgru1 mingru; do
  row=$(grep "^$m " "$tmp/a.out")
  if [ $rc = 0 ] && [[ "$row" == *" done" ]] && grep -Eq "^$m +[0-9.]+ +[0-9.]+ %" <<<"$row" &&
     [ -s "$tmp/a/$m/best.safetensors" ]; then
    echo "ok   $m: $row"
  else
    fail "$m (rc $rc):"; cat "$tmp/a.out"
  fi
done

# ---- a deadline, then the resume (the deadline must fall inside training:
# a signal during hgrn lra's set-up kills it before there is anything to
# save, so the run is long enough for slow builds to reach its steps) ----
HGRN_DEADLINE=6 HGRN_LRA_ARGS="$tiny --train.max_steps 500" bench "$tmp/b" 1 minlstm >"$tmp/b1.out" 2>&1
if grep -q "^minlstm .*interrupted (checkpointed" "$tmp/b1.out" && [ "$(cat "$tmp/b/minlstm.rc")" = 75 ] &&
   [ -s "$tmp/b/minlstm/last.state.safetensors" ]; then
  echo "ok   deadline: $(grep -m1 'stopped by SIGTERM' "$tmp/b/minlstm.log")"
else
  fail "deadline:"; cat "$tmp/b1.out"; tail -3 "$tmp/b/minlstm.log"
fi
HGRN_LRA_ARGS="$tiny --train.max_steps 500" bench "$tmp/b" 1 minlstm >"$tmp/b2.out" 2>&1
steps=$(grep -o '"step": [0-9]*, "epoch": [0-9.]*, "lr"' "$tmp/b/minlstm/metrics.jsonl" | awk '{print $2}' | tr -d ,)
dups=$(sort <<<"$steps" | uniq -d | wc -l)
if grep -q "^minlstm .* done$" "$tmp/b2.out" && grep -q "resumed from" "$tmp/b/minlstm.log" &&
   [ "$(tail -n 1 <<<"$steps")" = 500 ] && [ "$dups" = 0 ] && [ "$(wc -l <"$tmp/b/minlstm/wall_s")" = 2 ]; then
  echo "ok   resumed to step 500, every record once: $(grep '^minlstm ' "$tmp/b2.out")"
else
  fail "resume (last step $(tail -n 1 <<<"$steps"), $dups repeated):"; cat "$tmp/b2.out"
fi

# ---- a bad EPOCHS ----
out=$(bench "$tmp/c" 1.5 hgru1 2>&1); rc=$?
[ $rc = 2 ] && grep -q "EPOCHS must be a positive integer, not '1.5'" <<<"$out" && echo "ok   bad EPOCHS: $out" ||
  fail "bad EPOCHS (rc $rc): $out"

# ---- the curves ----
py=/usr/bin/python3; [ -x "$py" ] || py=python3
if "$py" -c 'import matplotlib' >/dev/null 2>&1; then
  if "$py" "$src/scripts/plot_lra.py" "$tmp/a" >"$tmp/p.out" 2>&1 &&
     [ "$(head -c 8 "$tmp/a/lra_curves.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    echo "ok   plot_lra.py: $(cat "$tmp/p.out")"
  else
    fail "plot_lra.py:"; cat "$tmp/p.out"
  fi
else
  echo "skip plot_lra.py: matplotlib is not installed"
fi

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
