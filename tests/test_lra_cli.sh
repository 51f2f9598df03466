#!/usr/bin/env bash
# `hgrn lra` refusals: whatever it refuses (a run directory that holds a
# run, no data or data that is not there, --gpus where it cannot run) exits 2
# with one line that names `hgrn lra` and the problem, before OUT/lra.cfg is
# written: an existing lra.cfg stays byte for byte, and none is left behind
# where there was none. No training runs here (test_lra.sh trains).
# usage: test_lra_cli.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passed=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; passed=$((passed + 1)); }

# the checks look for the batches by name only: an empty file is enough here
mkdir -p "$tmp/cifar" "$tmp/empty"
: >"$tmp/cifar/data_batch_1.bin"

# refused NAME PATTERN OUT ARGS...: exit 2, one stderr line starting "hgrn lra:"
# that matches PATTERN and never "hgrn train", and OUT as it was before
refused() {
  local name=$1 pat=$2 out=$3; shift 3
  local before=absent
  [ -e "$out/lra.cfg" ] && before=$(md5sum <"$out/lra.cfg")
  local existed=0; [ -e "$out" ] && existed=1
  "$hgrn" lra "$@" --out "$out" >"$tmp/o" 2>"$tmp/e"; local rc=$?
  local after=absent
  [ -e "$out/lra.cfg" ] && after=$(md5sum <"$out/lra.cfg")
  if [ $rc -ne 2 ]; then fail "$name: exit $rc, want 2: $(head -3 "$tmp/e")"
  elif [ "$(wc -l <"$tmp/e")" != 1 ] || ! grep -qE -- "^hgrn lra: .*$pat" "$tmp/e"; then
    fail "$name: want one line 'hgrn lra: ...$pat': $(head -3 "$tmp/e")"
  elif [ "$before" != "$after" ]; then fail "$name: $out/lra.cfg changed ($before -> $after)"
  elif [ $existed = 0 ] && [ -e "$out" ]; then fail "$name: left $out behind"
  else ok "$name: $(cat "$tmp/e")"
  fi
}

# a run directory of an hgru1 run (what hgrn lra and hgrn train leave there)
mkdir -p "$tmp/run"
printf '[model]\nmixer = "hgru1"\n# %s\n' "$RANDOM$RANDOM" >"$tmp/run/lra.cfg"
cp "$tmp/run/lra.cfg" "$tmp/run/config.cfg"
echo '{"step": 0}' >"$tmp/run/metrics.jsonl"
cp "$tmp/run/lra.cfg" "$tmp/lra.cfg.orig"

refused holds-run "--out $tmp/run already holds a run \(config.cfg|metrics.jsonl\): continue it with --resume, or start over with --overwrite" \
  "$tmp/run" --mixer lru --data "$tmp/cifar"
cmp -s "$tmp/run/lra.cfg" "$tmp/lra.cfg.orig" && ok "holds-run: lra.cfg byte for byte" || fail "holds-run: lra.cfg rewritten"
refused cifar10-without-path "--data cifar10 names the dataset but not where it is: pass --data DIR" \
  "$tmp/new" --mixer lru --data cifar10
refused no-data "no data: pass --data DIR" "$tmp/new" --mixer hgru1
refused missing-data-dir "data.path $tmp/none: no such directory" "$tmp/new" --mixer hgru1 --data cifar10 --data.path "$tmp/none"
refused not-cifar "data.path $tmp/empty: no CIFAR-10 batches there" "$tmp/new" --mixer hgru1 --data cifar10 --data.path "$tmp/empty"
refused not-fmnist "data.path $tmp/empty: no Fashion-MNIST IDX files there" "$tmp/new" --mixer hgru1 --data fmnist32 --data.path "$tmp/empty"
refused allow-changes-alone "--allow-changes goes with --resume" "$tmp/new" --mixer lru --data "$tmp/cifar" --allow-changes
refused resume-and-overwrite "give one of them" "$tmp/run" --mixer lru --data "$tmp/cifar" --resume --overwrite
: >"$tmp/afile"
refused out-is-a-file "--out $tmp/afile: not a directory" "$tmp/afile" --mixer lru --data "$tmp/cifar"
refused gpus-batch-norm "--gpus 2: the recipe's batch norm trains on one process" "$tmp/new" --mixer lru --data "$tmp/cifar" --gpus 2
refused gpus-device-cpu "--gpus 2 starts one process per GPU, but --device cpu was given; CPU ranks run under MPI: mpirun -np 2" \
  "$tmp/new" --mixer lru --data "$tmp/cifar" --gpus 2 --model.norm layer --device cpu
refused gpus-zero "--gpus '0'" "$tmp/new" --mixer lru --data "$tmp/cifar" --gpus 0
if [ "$("$hgrn" device)" = cpu ]; then
  refused gpus-no-device "--gpus 2 starts one process per GPU, but there is no CUDA device here" \
    "$tmp/new" --mixer lru --data "$tmp/cifar" --gpus 2 --model.norm layer
fi
cmp -s "$tmp/run/lra.cfg" "$tmp/lra.cfg.orig" && ok "after every refusal: lra.cfg byte for byte" || fail "lra.cfg changed"

echo "$passed passed, $fails failed"
[ $fails = 0 ]
