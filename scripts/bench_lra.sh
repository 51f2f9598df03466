#!/usr/bin/env bash
# bench_lra.sh OUT [EPOCHS] [MIXERS...] - the LRA image task's accuracy table:
# each mixer's recipe (configs/lra_image_<model>.cfg, canonical protocol) on
# Fashion-MNIST centred on 32x32 (`hgrn lra --data fmnist32`), one run per
# mixer in OUT/<mixer>, then a table of test top-1 (best and last), the
# epochs done, training img/s and wall time.
#
# EPOCHS (default: the recipe's 100) shortens the whole schedule, warm-up
# included (10 % of it, as in the recipe), so a short run still ends its
# cosine decay. MIXERS default to all five.
#
# Runs are spread over the visible GPUs, one queue per GPU, each run given
# its GPU through CUDA_VISIBLE_DEVICES (an inherited CUDA_VISIBLE_DEVICES=1,3
# gives the queues GPUs 1 and 3; HGRN_GPUS=N overrides the count; on a
# machine without a GPU the runs take turns on the CPU). A run directory that already holds a run is
# resumed (--resume), so calling the script again after an interruption
# continues every unfinished run. HGRN_DEADLINE=S: after S seconds every run
# still going gets SIGTERM, which makes `hgrn train` write a checkpoint and
# exit 75 (docs/RELIABILITY.md); the table then says "interrupted" and a later
# call resumes. The wall time of every invocation of a run is added up in
# OUT/<mixer>/wall_s.
#
# HGRN=path/to/hgrn (default build/hgrn). Extra `hgrn lra` options can be
# given in HGRN_LRA_ARGS (word-split), e.g. "--precision fp32".
set -u
out=${1:?usage: bench_lra.sh OUT [EPOCHS] [MIXERS...]}
epochs=${2:-100}
shift $(( $# >= 2 ? 2 : $# ))
mixers=("$@")
[ ${#mixers[@]} -gt 0 ] || mixers=(hgru1 hgru2 lru mingru minlstm)
hgrn=${HGRN:-build/hgrn}
[ -x "$hgrn" ] || { echo "bench_lra.sh: $hgrn: not an executable (set HGRN)" >&2; exit 2; }
case $epochs in ''|*[!0-9]*|0) echo "bench_lra.sh: EPOCHS must be a positive integer, not '$epochs'" >&2; exit 2;; esac
warmup=$(awk -v e="$epochs" 'BEGIN{printf "%g", e / 10}')
mkdir -p "$out" || exit 1
t0=$(date +%s)

gpus=${HGRN_GPUS:-}
if [ -z "$gpus" ]; then
  if [ "$("$hgrn" device 2>/dev/null)" = cuda ]; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    [ "$gpus" -gt 0 ] || gpus=1
  else
    gpus=0
  fi
fi
device=cuda; [ "$gpus" -gt 0 ] || { device=cpu; gpus=1; }
IFS=, read -r -a ids <<<"${CUDA_VISIBLE_DEVICES:-}"
if [ ${#ids[@]} -gt 0 ]; then
  [ -n "${HGRN_GPUS:-}" ] || gpus=${#ids[@]}
else
  for ((q = 0; q < gpus; q++)); do ids+=("$q"); done
fi

# one run (or its continuation) of mixer $1 on GPU $2
run_one() {
  local m=$1 g=$2 dir=$out/$1 resume=
  [ -e "$dir/last.state.safetensors" ] && resume=--resume
  [ -e "$dir/done" ] && return 0
  local s0; s0=$(date +%s.%N)
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=$g "$hgrn" lra --mixer "$m" --data fmnist32 --device $device --out "$dir" \
    --train.epochs "$epochs" --train.warmup_epochs "$warmup" ${HGRN_LRA_ARGS:-} $resume \
    >>"$dir.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$dir.pid"
  wait "$pid"
  local rc=$?
  rm -f "$dir.pid"
  mkdir -p "$dir"   # hgrn lra may have stopped before making it
  awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f\n", b - a}' >>"$dir/wall_s"
  echo "$rc" >"$dir.rc"
  [ $rc = 0 ] && touch "$dir/done"
  return 0
}

# queue q runs mixers q, q + gpus, ... one after the other
queue() {
  local q=$1 i
  for ((i = q; i < ${#mixers[@]}; i += gpus)); do
    [ -e "$out/.deadline" ] && break
    run_one "${mixers[$i]}" "${ids[$q]:-$q}"
  done
}

rm -f "$out/.deadline"
pids=()
for ((q = 0; q < gpus; q++)); do queue "$q" & pids+=($!); done
if [ -n "${HGRN_DEADLINE:-}" ]; then
  ( sleep "$HGRN_DEADLINE"; touch "$out/.deadline"
    for f in "$out"/*.pid; do [ -e "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null; done ) &
  timer=$!
fi
wait "${pids[@]}"
[ -n "${timer:-}" ] && kill "$timer" 2>/dev/null
rm -f "$out/.deadline"

# ---- the table ----
field() {  # field KEY LINE: the number after "KEY":
  sed -n "s/.*\"$1\": \([-0-9.e]*\).*/\1/p" <<<"$2"
}
echo
echo "LRA image task on fmnist32 (canonical protocol), $epochs-epoch schedule ($warmup of warm-up), device $device x $gpus"
printf "%-8s %8s %10s %10s %10s %10s  %s\n" mixer epochs "best top1" "last top1" "train i/s" "wall s" status
for m in "${mixers[@]}"; do
  dir=$out/$m
  mf=$dir/metrics.jsonl
  evals=$(grep '"val_top1"' "$mf" 2>/dev/null)
  last=$(tail -n 1 <<<"$evals")
  best=$(sed -n 's/.*"val_top1": \([0-9.]*\).*/\1/p' <<<"$evals" | sort -g | tail -n 1)
  ips=$(grep '"img_per_s"' "$mf" 2>/dev/null | sed -n 's/.*"img_per_s": \([0-9.]*\).*/\1/p' |
        awk '{s += $1; n++} END {if (n) printf "%.0f", s / n}')
  wall=$(awk '{s += $1} END {if (NR) printf "%.0f", s}' "$dir/wall_s" 2>/dev/null)
  rc=$(cat "$dir.rc" 2>/dev/null)
  status=done
  if [ ! -e "$dir/done" ]; then
    case $rc in
      75) status="interrupted (checkpointed; call again to resume)";;
      130|137|143) status="killed by a signal (rc $rc; call again: it resumes from the last checkpoint, if any)";;
      '') status="not started";;
      *) status="failed (rc $rc; see $dir.log)";;
    esac
  fi
  printf "%-8s %8s %10s %10s %10s %10s  %s\n" "$m" "$(field epoch "$last")" \
    "$(awk -v v="${best:-}" 'BEGIN{if (v != "") printf "%.2f %%", v; else printf "-"}')" \
    "$(awk -v v="$(field val_top1 "$last")" 'BEGIN{if (v != "") printf "%.2f %%", v; else printf "-"}')" \
    "${ips:--}" "${wall:--}" "$status"
done
echo "total $(( $(date +%s) - t0 )) s; runs in $out"
