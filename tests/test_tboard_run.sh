#!/usr/bin/env bash
# train.tensorboard = 1 on real runs, read back with Python
# (tests/read_tfevents.py: tensorboard's reader where it is installed, else
# its own reader of the framing, every CRC and the protobuf): the event
# file's scalars equal metrics.jsonl's, every training and evaluation
# number at its step; no event file without the key; and a run killed
# after its checkpoint at step 4 while saving step 6, then resumed: two
# files, the second's START drops what the first wrote after step 4 (the
# records metrics.jsonl's cut-back dropped too), and what remains equals the
# resumed run's metrics.jsonl once per tag and step; the same files with the
# START record moved to the field TensorBoard does not purge on fail. The
# same checks by the own reader where tensorboard's was used.
# usage: test_tboard_run.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$(realpath "$1"); src=$2
py=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1; then py=$p; break; fi
done
[ -n "$py" ] || { echo "no python3: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
read_back() {  # NAME DIR: both readers agree with metrics.jsonl
  local out
  if out=$("$py" "$src/tests/read_tfevents.py" "$2" 2>&1); then echo "ok   $1: $out"; else fail "$1: $out"; fi
  if out=$("$py" "$src/tests/read_tfevents.py" "$2" --reader own 2>&1); then echo "ok   $1: $out"; else fail "$1: $out"; fi
}
cfg=$src/configs/fmnist_mingru_tiny.cfg
tiny=(--device cpu --threads 1 --model.dim 16 --model.depth 2 --model.glu_dim 32 --data.train_limit 128
      --data.val_limit 64 --train.batch_size 32 --train.epochs 2 --train.log_every 1)

# a fresh run: 2 epochs of 4 steps, an evaluation after each
if "$hgrn" train --config "$cfg" "${tiny[@]}" --train.tensorboard 1 --out "$tmp/a" >"$tmp/a.log" 2>&1; then
  n=$(ls "$tmp/a"/events.out.tfevents.* 2>/dev/null | wc -l)
  [ "$n" -eq 1 ] || fail "fresh: $n event files, want 1"
  grep -q '"val_top1"' "$tmp/a/metrics.jsonl" || fail "fresh: no evaluation record"
  read_back fresh "$tmp/a"
else
  fail "fresh run:"; tail -n 3 "$tmp/a.log"
fi

# off by default: no event file
if "$hgrn" train --config "$cfg" "${tiny[@]}" --train.epochs 1 --out "$tmp/b" >"$tmp/b.log" 2>&1; then
  ls "$tmp/b"/events.out.tfevents.* >/dev/null 2>&1 && fail "off: an event file without train.tensorboard" ||
    echo "ok   off: no event file without train.tensorboard"
else
  fail "run without tensorboard:"; tail -n 3 "$tmp/b.log"
fi

# killed while saving step 6 (checkpoints every 2 steps), then resumed from step 4
HGRN_FAULT=ckpt-staged-weights@6 "$hgrn" train --config "$cfg" "${tiny[@]}" --train.tensorboard 1 \
  --train.ckpt_every 2 --out "$tmp/c" >"$tmp/c1.log" 2>&1
rc=$?
[ $rc -eq 137 ] || fail "resume: the killed run exited $rc, want 137 (SIGKILL)"
grep -q '"step": 6,' "$tmp/c/metrics.jsonl" || fail "resume: the killed run recorded no step 6"
sleep 1   # the resumed run's file is named after a later second
if "$hgrn" train --config "$cfg" "${tiny[@]}" --train.tensorboard 1 --train.ckpt_every 2 --out "$tmp/c" --resume \
     >"$tmp/c2.log" 2>&1; then
  grep -q "step 4" "$tmp/c2.log" || fail "resume: not resumed from step 4: $(head -n 1 "$tmp/c2.log")"
  n=$(ls "$tmp/c"/events.out.tfevents.* | wc -l)
  [ "$n" -eq 2 ] || fail "resume: $n event files, want 2"
  read_back resumed "$tmp/c"
  "$py" "$src/tests/read_tfevents.py" "$tmp/c" --reader own | grep -qE ", [1-9][0-9]* purged" ||
    fail "resume: the START record purged nothing (the killed run's steps 5 and 6 should go)"
  # the own reader models TensorBoard: a START written as Event field 6
  # (log_message, which TensorBoard ignores) instead of 7 purges nothing, and
  # the killed run's step 4 then shows twice
  mkdir "$tmp/d" && cp "$tmp/c"/* "$tmp/d"/ && "$py" - "$tmp/d" "$src/tests" <<'PY'
import os, struct, sys
sys.dont_write_bytecode = True   # nothing written into the source tree
sys.path.insert(0, sys.argv[2])
from read_tfevents import crc32c, masked, records
path = os.path.join(sys.argv[1], sorted(n for n in os.listdir(sys.argv[1]) if "tfevents" in n)[-1])
out = b""
for body in records(path):
    if body[11:12] == b"\x3a":   # the START: field 7's key after wall_time (9 bytes) and step 4 (2)
        body = body[:11] + b"\x32" + body[12:]
    head = struct.pack("<Q", len(body))
    out += head + struct.pack("<I", masked(crc32c(head))) + body + struct.pack("<I", masked(crc32c(body)))
with open(path, "wb") as f:
    f.write(out)
PY
  if out=$("$py" "$src/tests/read_tfevents.py" "$tmp/d" --reader own 2>&1); then
    fail "resume: a START as log_message (field 6) passed the own reader: $out"
  else
    echo "ok   resumed, START as field 6: $out"
  fi
else
  fail "resumed run:"; tail -n 3 "$tmp/c2.log"
fi

# a damaged file is caught: one byte of the last record's data changed
f=$(ls "$tmp/a"/events.out.tfevents.* 2>/dev/null | head -n 1)
if [ -n "$f" ]; then
  size=$(stat -c %s "$f")
  printf '\x55' | dd of="$f" bs=1 seek=$((size - 8)) conv=notrunc 2>/dev/null
  if "$py" "$src/tests/read_tfevents.py" "$tmp/a" --reader own >"$tmp/bad.out" 2>&1; then
    fail "damaged: a changed byte passed"
  else
    echo "ok   damaged: $(cat "$tmp/bad.out")"
  fi
fi
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
