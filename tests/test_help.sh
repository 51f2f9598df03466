#!/usr/bin/env bash
# --help on every command `hgrn --help` lists (a new command is covered by
# being listed): exit 0, a usage on stdout, nothing on stderr, and no work
# done: run in an empty directory with arguments that would otherwise start
# work (write files, train, run the device query), nothing may appear there.
# Then the help texts that must say what the code does: lra's recipe values
# and its CPU speed, train's default --out, classify's decoding on CUDA (as
# docs/CLI.md says).
# usage: test_help.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$(realpath "$1"); src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passed=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; passed=$((passed + 1)); }

commands=$("$hgrn" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}')
[ "$(echo "$commands" | wc -w)" -ge 10 ] || { echo "FAIL hgrn --help lists only: $commands"; exit 1; }

# args_for CMD: arguments that would do work without --help
args_for() {
  case $1 in
    train) echo "--config $src/configs/fmnist_hgrn1_tiny.cfg --device cpu --out run --train.max_steps 1" ;;
    lra) echo "--mixer lru --data fmnist32 --out run" ;;
    eval|classify|forward) echo "--ckpt run/x.safetensors --device cpu photo.jpg" ;;
    info|bench|show-batch) echo "--config $src/configs/fmnist_hgrn1_tiny.cfg --device cpu out.png" ;;
    bench-data) echo "--synth out 2 40x30" ;;
    plot) echo "run out.png" ;;
    prepare) echo "fmnist out" ;;
    *) echo "" ;;
  esac
}

for cmd in $commands; do
  bad=0
  for form in "--help" "-h" "ARGS --help"; do
    work=$tmp/w; rm -rf "$work"; mkdir -p "$work"
    # shellcheck disable=SC2046
    if [ "$form" = "ARGS --help" ]; then set -- $(args_for "$cmd") --help; else set -- "$form"; fi
    (cd "$work" && timeout 60 "$hgrn" "$cmd" "$@" >"$tmp/out" 2>"$tmp/err"); rc=$?
    left=$(ls -A "$work")
    bad=1
    if [ $rc -ne 0 ]; then fail "hgrn $cmd $*: exit $rc: $(head -2 "$tmp/err")"
    elif ! grep -qi "usage" "$tmp/out"; then fail "hgrn $cmd $*: no usage on stdout: $(head -c 200 "$tmp/out")"
    elif [ -s "$tmp/err" ]; then fail "hgrn $cmd $*: stderr: $(head -2 "$tmp/err")"
    elif [ -n "$left" ]; then fail "hgrn $cmd $*: did work, left: $left"
    else bad=0
    fi
  done
  [ $bad = 0 ] && ok "hgrn $cmd --help, -h and with arguments: exit 0, usage on stdout, no work"
done

# the texts: what the defaults really are, and what the code does
"$hgrn" lra --help >"$tmp/lra"
grep -q "model.dim = 512" "$tmp/lra" && grep -q "train.batch_size = 50" "$tmp/lra" && grep -q "train.lr = 0.003" "$tmp/lra" &&
  grep -q "model.image_size = 32" "$tmp/lra" && grep -q -- "--mixer hgru2 .*train.lr = 0.001" "$tmp/lra" &&
  grep -q "about 1 img/s on a CPU" "$tmp/lra" && grep -q -- "--out DIR .*default runs/lra" "$tmp/lra" &&
  ok "lra --help: the recipe's values (d 512, 32 px, batch 50, lr 3e-3; hgru2 1e-3), --out's default, the CPU speed" ||
  fail "lra --help lacks the recipe's defaults: $(grep -E 'dim|image_size|img/s' "$tmp/lra" | head -5)"
"$hgrn" train --help | grep -q "default runs/train" && ok "train --help: the default --out" || fail "train --help: no default --out"
"$hgrn" classify --help | tr '\n' ' ' | grep -q "on --device cuda, JPEGs are decoded by nvJPEG" && grep -q "on \`--device cuda\` JPEGs\$" "$src/docs/CLI.md" &&
  grep -A1 "on \`--device cuda\` JPEGs\$" "$src/docs/CLI.md" | grep -q "are decoded by nvJPEG" &&
  ok "classify: --help and docs/CLI.md both say nvJPEG on CUDA" || fail "classify --help and docs/CLI.md disagree on decoding"

echo "$passed passed, $fails failed"
[ $fails = 0 ]
