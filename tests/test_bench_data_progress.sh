#!/usr/bin/env bash
# hgrn bench-data reports its progress on stderr (it runs for tens of
# seconds): a line for each phase (checking the files, each transform at 1
# thread and at N threads); when stderr is not a terminal those are plain
# lines, without carriage returns or terminal escapes, and the results on
# stdout are unchanged; on a terminal (script(1) provides one; skipped
# without it) the images done are redrawn in place (\r ... ESC[K).
# usage: test_bench_data_progress.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
"$hgrn" bench-data --synth "$tmp/img" 24 320x240 >/dev/null || { echo "FAIL bench-data --synth"; exit 1; }

# --- stderr to a file: phase lines, plain
"$hgrn" bench-data "$tmp/img" --images 120 --threads 2 >"$tmp/out" 2>"$tmp/err" || fail "bench-data: exit $?"
for want in "^bench-data: checking that the 24 files decode$" \
            "^bench-data: train transform, 1 thread, stages timed: 120 images$" \
            "^bench-data: train transform, 1 thread: 120 images$" \
            "^bench-data: train transform, 2 threads: 120 images$" \
            "^bench-data: eval transform, 2 threads: 120 images$"; do
  grep -q "$want" "$tmp/err" || fail "no phase line /$want/ in stderr: $(cat "$tmp/err")"
done
if grep -q $'\r' "$tmp/err" || grep -q $'\033' "$tmp/err"; then fail "carriage returns or escapes in a log"; else ok "log: $(wc -l <"$tmp/err") plain phase lines"; fi
grep -q "^train 2 threads: " "$tmp/out" && grep -q "^eval  1 thread : " "$tmp/out" && ! grep -q "^bench-data: checking" "$tmp/out" &&
  ok "results on stdout, progress not among them" || fail "stdout: $(cat "$tmp/out")"

# --- on a terminal: the images done redrawn in place
if command -v script >/dev/null 2>&1; then
  script -qec "'$hgrn' bench-data '$tmp/img' --images 600 --threads 1 --only eval >/dev/null" /dev/null >"$tmp/tty" 2>&1
  if grep -q $'\r  eval transform, 1 thread: [0-9]*/600 images, [0-9]* img/s\033\[K' "$tmp/tty"; then
    ok "terminal: redrawn '$(grep -o $'eval transform, 1 thread: [0-9]*/600 images' "$tmp/tty" | head -n 1)' lines"
  else
    fail "terminal: no redrawn progress line: $(cat -v "$tmp/tty" | head -c 600)"
  fi
else
  echo "skip terminal check: no script(1)"
fi
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
