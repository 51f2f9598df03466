#!/usr/bin/env bash
# The MPI communicator on the CPU backend, under mpirun, through the same
# comm_create the trainer uses (test_comm.c's modes):
#  1. every collective at -np 1, 2 and 3 (3 ranks on 2 cores: oversubscribed);
#  2. rank 0's blob over MPI (launch_share_blob), and a rank 0 that fails to
#     make it stops every rank at once with its reason;
#  3. failure mid-run: rank 1 SIGKILLed, hung, aborting or exiting makes the
#     whole job exit non-zero within the bound (a 3 s comm timeout + margin),
#     with a message naming the rank and the cause, and no rank survives.
# Skips (77) without mpirun or in a build without MPI.
# usage: test_comm_mpi.sh HGRN_BINARY SOURCE_DIR
set -u
bin=$(dirname "$1")/test_comm
command -v mpirun >/dev/null || { echo "skip: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }
"$bin" has-mpi || { echo "skip: this hgrn was built without MPI"; exit 77; }
# OpenMPI in CI: run as root, more ranks than cores, no ssh (single-node
# launcher), no ptrace-based single copy (containers forbid it)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated \
       OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
# OpenMPI keeps its allocations at exit by design: LeakSanitizer would fail every rank
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }   # seconds since $1
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# ---- 1. collectives ----
for np in 1 2 3; do
  if ! timeout 120 mpirun -np $np "$bin" collectives 30 >"$tmp/c$np.log" 2>&1; then
    fail "collectives at -np $np:"; cat "$tmp/c$np.log"; continue
  fi
  for r in $(seq 0 $((np - 1))); do
    grep -q "^rank $r of $np: ok (mpi, local rank $r of $np)" "$tmp/c$np.log" || { fail "-np $np: no ok from rank $r"; cat "$tmp/c$np.log"; }
  done
  echo "ok   collectives at -np $np"
done

# ---- 2. rank 0's blob over MPI ----
if timeout 60 mpirun -np 3 "$bin" share 10 >"$tmp/s.log" 2>&1; then
  n=$(grep -c "^rank [0-2] of 3: blob " "$tmp/s.log")
  distinct=$(grep "^rank [0-2] of 3: blob " "$tmp/s.log" | awk '{print $NF}' | sort -u | wc -l)
  [ "$n" = 3 ] && [ "$distinct" = 1 ] && echo "ok   rank 0's blob reached ranks 1 and 2 over MPI" ||
    { fail "blob over MPI: $n lines, $distinct distinct blobs"; cat "$tmp/s.log"; }
else
  fail "share over MPI"; cat "$tmp/s.log"
fi
# mpirun kills the other ranks as soon as one exits non-zero: rank 0, failing
# first, could take ranks 1 and 2 down before they print what they were told.
# Here mpirun lets every rank finish (OpenMPI 4's orte parameter; mpirun then
# exits 0 whatever the ranks return), so each rank prints its own exit code
# and the check sees every rank's line, not a race with the kill.
start=$(date +%s.%N)
OMPI_MCA_orte_abort_on_non_zero_status=0 timeout 60 mpirun -np 3 \
  sh -c '"$0" share 10 fail; echo "rank exit $?"' "$bin" >"$tmp/sf.log" 2>&1; rc=$?
secs=$(elapsed $start)
if [ $rc != 0 ] || [ "$(grep -c "rank 0 failed: could not make the blob (test)" "$tmp/sf.log")" != 2 ] ||
   [ "$(grep -c "^test_comm: could not make the blob (test)" "$tmp/sf.log")" != 1 ] ||
   [ "$(grep -c "^rank exit 1$" "$tmp/sf.log")" != 3 ] || ! lt "$secs" 8; then
  fail "rank 0's failure over MPI: mpirun rc $rc after $secs s"; cat "$tmp/sf.log"
else
  echo "ok   rank 0's failure stopped every rank over MPI (each exited 1, ranks 1 and 2 naming it; $secs s)"
fi

# ---- 3. a rank that dies, hangs, aborts or exits mid-run ----
timeout_s=3
bound=$((timeout_s + 12))
for kind in kill hang abort exit; do
  start=$(date +%s.%N)
  timeout 120 mpirun -np 3 "$bin" fail $kind 1 $timeout_s >"$tmp/f_$kind.log" 2>&1; rc=$?
  secs=$(elapsed $start)
  case $kind in   # who names the cause: mpirun for a death, the survivors for a hang, the rank for an abort
    kill)  want="process rank 1 .* exited on signal 9" ;;
    hang)  want="hgrn: rank [02]: all-reduce of 4096 floats did not complete within $timeout_s s: another rank died, failed or hangs" ;;
    abort) want="hgrn: rank 1: deliberate failure \(test_comm fail abort\)" ;;
    exit)  want="exited with non-zero status" ;;
  esac
  ok=1
  [ $rc != 0 ] || { fail "$kind: the job exited 0"; ok=0; }
  [ $rc != 124 ] || { fail "$kind: still running after 120 s (a silent hang)"; ok=0; }
  lt "$secs" $bound || { fail "$kind: took $secs s, bound $bound s"; ok=0; }
  grep -q "survived" "$tmp/f_$kind.log" && { fail "$kind: a rank survived"; ok=0; }
  grep -Eq "$want" "$tmp/f_$kind.log" || { fail "$kind: no message matching '$want'"; ok=0; }
  [ $ok = 1 ] && echo "ok   rank 1 $kind: job exited $rc after $secs s: $(grep -Em1 "$want" "$tmp/f_$kind.log" | sed 's/^ *//')" ||
    cat "$tmp/f_$kind.log"
done

[ $fails = 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
