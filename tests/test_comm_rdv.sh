#!/usr/bin/env bash
# The torchrun-style path without MPI: processes started with RANK,
# WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT meet at the TCP
# rendezvous (test_comm share: launch_share_blob, then a rendezvous barrier).
#  1. 3 ranks, rank 0 started last: every rank gets rank 0's blob;
#  2. no rank 0: rank 1 gives up after the timeout, naming the address, the
#     port and the cause; rank 0 alone names the ranks that never came;
#  3. WORLD_SIZE differing between ranks: both fail at once, saying so;
#  4. rank 0 failing to make the blob: the others stop at once with its reason;
#  5. an address that does not resolve;
#  6. launch_local (hgrn train --gpus N) starting 3 ranks that rendezvous;
#  7. the CPU backend under launch_local: each rank stops with "launch with
#     mpirun", and the launcher names the first rank that failed.
# usage: test_comm_rdv.sh HGRN_BINARY SOURCE_DIR
set -u
bin=$(dirname "$1")/test_comm
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }   # seconds since $1
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_STEP_NUM_TASKS
# OpenMPI's variables must not be what makes this work: a rank that touched
# MPI outside mpirun would start a singleton; MPI is absent from this path
rank() {   # rank R of world W on port P: test_comm share T [fail] > log
  local r=$1 w=$2 p=$3; shift 3
  RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r LOCAL_WORLD_SIZE=$w MASTER_ADDR=${ADDR:-127.0.0.1} MASTER_PORT=$p \
    timeout 60 "$bin" share "$@"
}

# ---- 1. three ranks ----
port=$("$bin" free-port)
rank 2 3 $port 10 >"$tmp/r2.log" 2>&1 & p2=$!
rank 1 3 $port 10 >"$tmp/r1.log" 2>&1 & p1=$!
sleep 0.5   # the others retry until rank 0 listens
rank 0 3 $port 10 >"$tmp/r0.log" 2>&1 & p0=$!
ok=1
for r in 0 1 2; do
  pid=$(eval echo \$p$r)
  wait $pid || { fail "rank $r of 3 exited $?: $(cat "$tmp/r$r.log")"; ok=0; }
done
blobs=$(cat "$tmp"/r[012].log | grep -c "^rank [012] of 3: blob ")
distinct=$(cat "$tmp"/r[012].log | grep "^rank [012] of 3: blob " | awk '{print $NF}' | sort -u | wc -l)
[ "$blobs" = 3 ] && [ "$distinct" = 1 ] || { fail "3 ranks: $blobs blob lines, $distinct distinct"; ok=0; }
[ $ok = 1 ] && echo "ok   3 ranks: each got rank 0's blob and passed the barrier"

# ---- 2. no rank 0 ----
port=$("$bin" free-port)
start=$(date +%s.%N)
rank 1 3 $port 2 >"$tmp/m1.log" 2>&1; rc=$?
secs=$(elapsed $start)
want="rendezvous at 127.0.0.1:$port (rank 1 of 3): could not reach rank 0 within 2 s: Connection refused"
if [ $rc = 0 ] || ! grep -qF "$want" "$tmp/m1.log" || ! lt "$secs" 6 || lt "$secs" 2; then
  fail "missing rank 0: rc $rc after $secs s: $(cat "$tmp/m1.log")"
else
  echo "ok   missing rank 0: rank 1 gave up after $secs s: $(cat "$tmp/m1.log")"
fi
start=$(date +%s.%N)
rank 0 3 $port 2 >"$tmp/m0.log" 2>&1; rc=$?
secs=$(elapsed $start)
want="rank 0 waited 2 s; ranks 1, 2 of WORLD_SIZE 3 did not connect"
if [ $rc = 0 ] || ! grep -qF "$want" "$tmp/m0.log" || ! lt "$secs" 6; then
  fail "rank 0 alone: rc $rc after $secs s: $(cat "$tmp/m0.log")"
else
  echo "ok   rank 0 alone: $(cat "$tmp/m0.log")"
fi

# ---- 3. WORLD_SIZE differs ----
port=$("$bin" free-port)
start=$(date +%s.%N)
rank 0 3 $port 10 >"$tmp/w0.log" 2>&1 & p0=$!
rank 1 2 $port 10 >"$tmp/w1.log" 2>&1; rc1=$?
wait $p0; rc0=$?
secs=$(elapsed $start)
want="WORLD_SIZE differs between ranks: rank 1 has 2, rank 0 has 3"
if [ $rc0 = 0 ] || [ $rc1 = 0 ] || ! grep -qF "$want" "$tmp/w0.log" || ! grep -qF "rank 0 refused: $want" "$tmp/w1.log" ||
   ! lt "$secs" 5; then
  fail "WORLD_SIZE mismatch: rc $rc0/$rc1 after $secs s: $(cat "$tmp/w0.log" "$tmp/w1.log")"
else
  echo "ok   WORLD_SIZE mismatch: both failed at once: $(cat "$tmp/w1.log")"
fi

# ---- 4. rank 0 fails to make the blob ----
port=$("$bin" free-port)
start=$(date +%s.%N)
rank 1 2 $port 10 fail >"$tmp/f1.log" 2>&1 & p1=$!
rank 0 2 $port 10 fail >"$tmp/f0.log" 2>&1; rc0=$?
wait $p1; rc1=$?
secs=$(elapsed $start)
if [ $rc0 = 0 ] || [ $rc1 = 0 ] || ! grep -qF "rank 0 failed: could not make the blob (test)" "$tmp/f1.log" ||
   ! lt "$secs" 5; then
  fail "rank 0's failure: rc $rc0/$rc1 after $secs s: $(cat "$tmp/f0.log" "$tmp/f1.log")"
else
  echo "ok   rank 0's failure reached rank 1 at once: $(cat "$tmp/f1.log")"
fi

# ---- 5. an address that does not resolve ----
ADDR=no-such-host.invalid rank 1 2 29500 2 >"$tmp/a.log" 2>&1 && fail "unresolvable MASTER_ADDR accepted"
grep -qF "cannot resolve MASTER_ADDR 'no-such-host.invalid'" "$tmp/a.log" &&
  echo "ok   unresolvable MASTER_ADDR: $(cat "$tmp/a.log")" || fail "unresolvable MASTER_ADDR: $(cat "$tmp/a.log")"

# ---- 6. launch_local: 3 ranks, their own port ----
if "$bin" local 3 share 10 >"$tmp/l.log" 2>&1; then
  blobs=$(grep -c "^rank [012] of 3: blob " "$tmp/l.log")
  distinct=$(grep "^rank [012] of 3: blob " "$tmp/l.log" | awk '{print $NF}' | sort -u | wc -l)
  [ "$blobs" = 3 ] && [ "$distinct" = 1 ] && echo "ok   launch_local: 3 ranks met at the rendezvous" ||
    fail "launch_local: $blobs blob lines, $distinct distinct: $(cat "$tmp/l.log")"
else
  fail "launch_local 3 share: $(cat "$tmp/l.log")"
fi

# ---- 7. the CPU backend under launch_local ----
start=$(date +%s.%N)
"$bin" local 2 collectives 5 >"$tmp/lc.log" 2>&1; rc=$?
secs=$(elapsed $start)
if [ $rc != 1 ] || ! grep -qF "the CPU backend's collectives are MPI: launch with mpirun -np 2" "$tmp/lc.log" ||
   ! grep -Eq "test_comm: local: rank [01] of 2 \(pid [0-9]+\) exited with status 1; stopping the other ranks" "$tmp/lc.log" ||
   ! lt "$secs" 5; then
  fail "CPU backend under launch_local: rc $rc after $secs s: $(cat "$tmp/lc.log")"
else
  echo "ok   CPU backend under launch_local: $(grep -m1 "CPU backend" "$tmp/lc.log")"
fi

[ $fails = 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
