#!/usr/bin/env bash
# hgrn bench --mixers --hgru2-chunk L (the HGRU2 scan's cut, forced for
# measurements): a value that is not a token count 0..1048576 is refused
# with one line naming the option, exit 2, before any device work; a valid
# one is accepted (then, without a GPU, the usual CUDA-only refusal, exit 2;
# with one, the table is printed). The chunked path itself is tested on the
# GPU by test_ops_cuda's test_hgru2_forced_chunks.
# usage: test_bench_hgru2_chunk.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$(realpath "$1")
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

for v in abc -3 64x 2000000 ""; do
  err=$("$hgrn" bench --mixers --hgru2-chunk "$v" 2>&1 >/dev/null); rc=$?
  [ $rc = 2 ] || fail "--hgru2-chunk '$v': exit $rc, want 2"
  [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || fail "--hgru2-chunk '$v': not one line: $err"
  case $err in *"--hgru2-chunk takes a token count"*"'$v'"*) ;; *) fail "--hgru2-chunk '$v': $err" ;; esac
done
err=$("$hgrn" bench --mixers --hgru2-chunk 2>&1 >/dev/null); rc=$?
[ $rc = 2 ] && case $err in *"--hgru2-chunk takes"*) true ;; *) false ;; esac ||
  fail "--hgru2-chunk without a value: exit $rc: $err"
for v in 0 64; do
  err=$(timeout 300 "$hgrn" bench --mixers --hgru2-chunk $v 2>&1 >/dev/null); rc=$?
  case $err in *"--hgru2-chunk"*) fail "--hgru2-chunk $v refused: $err" ;; esac
  if [ $rc != 0 ]; then
    case $err in *"no CUDA backend or sees no GPU"*) [ $rc = 2 ] || fail "--hgru2-chunk $v: exit $rc" ;;
                 *) fail "--hgru2-chunk $v: exit $rc: $err" ;; esac
  fi
done
[ $fails = 0 ] && echo "ok: --hgru2-chunk refusals and acceptance"
exit $((fails > 0))
