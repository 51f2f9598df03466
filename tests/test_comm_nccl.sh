#!/usr/bin/env bash
# The NCCL communicator across GPUs of one host (needs 2 or more GPUs and
# NCCL; exits 77 otherwise; NCCL at world 1 is test_comm's own CMocka test):
#  1. every collective at world 2, eager and inside a CUDA graph, started by
#     launch_local (torchrun-style variables, the id over the TCP rendezvous)
#     and, where this build has MPI, by mpirun (the id over MPI);
#  2. a hung rank: the other's watchdog stops it within the timeout with a
#     message naming the stalled collective, and the launcher stops the rest;
#  3. a rank SIGKILLed with no launcher to clean up: the survivor exits
#     non-zero within the bound, through NCCL's error or the watchdog.
# usage: test_comm_nccl.sh HGRN_BINARY SOURCE_DIR
set -u
bin=$(dirname "$1")/test_comm
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
"$bin" has-nccl || { echo "skip: no GPU, or this hgrn was built without NCCL"; exit 77; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then   # the GPUs this process may use
  IFS=, read -r -a visible <<<"$CUDA_VISIBLE_DEVICES"
  [ ${#visible[@]} -lt "$ngpu" ] && ngpu=${#visible[@]}
fi
[ "$ngpu" -ge 2 ] || { echo "skip: $ngpu GPU(s); the multi-GPU checks need 2"; exit 77; }
export HGRN_TEST_DEVICE=cuda
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# ---- 1. collectives ----
if timeout 300 "$bin" local 2 collectives 60 >"$tmp/c.log" 2>&1 &&
   grep -q "^rank 0 of 2: ok (nccl, local rank 0 of 2)" "$tmp/c.log" &&
   grep -q "^rank 1 of 2: ok (nccl, local rank 1 of 2)" "$tmp/c.log"; then
  echo "ok   collectives over NCCL at world 2 (launch_local, rendezvous)"
else
  fail "collectives over NCCL (launch_local):"; cat "$tmp/c.log"
fi
if command -v mpirun >/dev/null && "$bin" has-mpi; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated \
         OMPI_MCA_btl_vader_single_copy_mechanism=none
  if timeout 300 mpirun -np 2 -x HGRN_TEST_DEVICE "$bin" collectives 60 >"$tmp/m.log" 2>&1 &&
     [ "$(grep -c "^rank [01] of 2: ok (nccl" "$tmp/m.log")" = 2 ]; then
    echo "ok   collectives over NCCL at world 2 (mpirun, id over MPI)"
  else
    fail "collectives over NCCL (mpirun):"; cat "$tmp/m.log"
  fi
fi

# ---- 2. a hung rank, under launch_local ----
start=$(date +%s.%N)
timeout 300 "$bin" local 2 fail hang 1 5 >"$tmp/h.log" 2>&1; rc=$?
secs=$(elapsed $start)
want="hgrn: rank 0: a collective on device 0 .* did not complete within 5 s"
if [ $rc = 0 ] || [ $rc = 124 ] || ! grep -Eq "$want" "$tmp/h.log" || ! lt "$secs" 60 || grep -q survived "$tmp/h.log"; then
  fail "hung rank: rc $rc after $secs s:"; cat "$tmp/h.log"
else
  echo "ok   hung rank: exit $rc after $secs s: $(grep -Em1 "$want" "$tmp/h.log")"
fi

# ---- 3. a rank SIGKILLed, no launcher ----
port=$("$bin" free-port)
start=$(date +%s.%N)
for r in 1 0; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 "$bin" fail kill 1 5 \
    >"$tmp/k$r.log" 2>&1 &
  eval p$r=\$!
done
wait $p0; rc0=$?
wait $p1
secs=$(elapsed $start)
if [ $rc0 = 0 ] || [ $rc0 = 124 ] || ! grep -q "^hgrn: rank 0: " "$tmp/k0.log" || ! lt "$secs" 60; then
  fail "killed rank: survivor rc $rc0 after $secs s:"; cat "$tmp/k0.log" "$tmp/k1.log"
else
  echo "ok   killed rank: the survivor exited $rc0 after $secs s: $(grep -m1 "^hgrn: rank 0: " "$tmp/k0.log")"
fi

[ $fails = 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
