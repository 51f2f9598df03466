#!/usr/bin/env bash
# hgrn bench --ops runs the op table (src/core/op_table.c, the rows
# test_backend_ops checks): on the CPU backend at the test's shapes every
# row of the table gives a forward row (and its backward where it has one)
# with a finite, positive time; the options it does not take, and bf16 on
# the CPU, are refused with exit 2 before any work.
hgrn="$1"
src="$2"
fails=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

OMP_NUM_THREADS=2 timeout 300 "$hgrn" bench --ops --device cpu --test-shapes >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAIL bench --ops --device cpu --test-shapes: exit $rc"; cat "$out"; fails=$((fails + 1)); }
# the table's rows, from its source: '    {"name", "covers ..."'
names=$(grep -oE '^    \{"[a-z0-9_]+", "' "$src/src/core/op_table.c" | grep -oE '[a-z0-9_]+')
[ "$(echo "$names" | wc -w)" -ge 28 ] || { echo "FAIL: only $(echo "$names" | wc -w) rows read from op_table.c"; fails=$((fails + 1)); }
for n in $names; do
  # "fp32  NAME fwd  SHAPE  MS ..." with MS a positive number
  ms=$(awk -v n="$n" '$1 == "fp32" && $2 == n && $3 == "fwd" { print $5 }' "$out")
  [ -n "$ms" ] || { echo "FAIL: no forward row for $n"; fails=$((fails + 1)); continue; }
  for v in $ms; do
    awk -v v="$v" 'BEGIN { exit !(v + 0 > 0 && v + 0 < 1e6) }' || { echo "FAIL: $n fwd: '$v' ms"; fails=$((fails + 1)); }
  done
done
for n in layernorm hgru1 hgru2 scan matmul batchnorm ln_residual; do   # rows with a backward
  grep -qE "^fp32 +$n bwd " "$out" || { echo "FAIL: no backward row for $n"; fails=$((fails + 1)); }
done
grep -qiE 'nan|inf |out of memory' "$out" && { echo "FAIL: a row says nan, inf or out of memory"; grep -iE 'nan|inf |out of memory' "$out"; fails=$((fails + 1)); }

expect2() {   # NAME PATTERN -- command: exit 2, stderr's first line matches, nothing on stdout
  local name=$1 pat=$2; shift 3
  local err
  err=$("$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -eq 2 ] && echo "$err" | head -n 1 | grep -qE "$pat"; then echo "ok   $name: $(echo "$err" | head -n 1)"
  else echo "FAIL $name (exit $rc): $err"; fails=$((fails + 1)); fi
}
expect2 unknown-option "bench --ops: unknown option --batch" -- "$hgrn" bench --ops --device cpu --batch 3
expect2 bf16-on-cpu "bench --ops: --precision bf16 needs --device cuda" -- "$hgrn" bench --ops --device cpu --precision bf16
expect2 bad-device "bench --ops: --device gpu: expected cpu or cuda" -- "$hgrn" bench --ops --device gpu

[ $fails -eq 0 ] && echo "test_bench_ops: ok" || echo "test_bench_ops: $fails failure(s)"
[ $fails -eq 0 ]
