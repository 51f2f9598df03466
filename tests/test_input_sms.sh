#!/usr/bin/env bash
# data.input_sms (the GPU input pipeline's own SMs, green contexts):
#  - anywhere: values other than auto, 0 or a multiple of 8 are refused
#    before any work (exit 2) with a message naming the key;
#  - on a GPU (skipped, 77, without one, or without pillow, numpy and
#    scikit-image for scripts/make_photos.py): training from JPEG files with
#    data.decode gpu on an 8-SM split says so in one line and runs its steps;
#    with auto it measures both arrangements and says so (both rates, the
#    choice) in one line;
#    where green contexts are unavailable (HGRN_FAULT=no-green-contexts stands
#    in for an old driver or a MIG instance) it says so in one line and trains
#    unsplit; hgrn bench runs its step on the training side; the epoch
#    summary's GPU input line names CUDA_DEVICE_MAX_CONNECTIONS: 32 as hgrn
#    train sets it, or the environment's own value.
# usage: test_input_sms.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2; fails=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for bad in 12 -8 abc 8x; do
  "$hgrn" bench --config "$src/configs/fmnist_hgrn1_tiny.cfg" --device cpu --steps 1 --data.input_sms "$bad" \
    >"$tmp/bad.log" 2>&1
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q "data.input_sms" "$tmp/bad.log"; then
    echo "FAIL data.input_sms = $bad: exit $rc, $(tail -n 1 "$tmp/bad.log")"; fails=$((fails + 1))
  else
    echo "ok   data.input_sms = $bad refused: $(tail -n 1 "$tmp/bad.log")"
  fi
done
if [ "$("$hgrn" device 2>/dev/null)" != cuda ]; then
  [ $fails -eq 0 ] && { echo "no GPU: the rest skipped"; exit 77; }
  exit 1
fi
py=
for p in python3 /usr/bin/python3; do
  "$p" -c 'import numpy, PIL, skimage' 2>/dev/null && { py=$p; break; }
done
[ -n "$py" ] || py=python3
if ! { "$py" "$src/scripts/make_photos.py" "$tmp/photos/train" 96 && "$py" "$src/scripts/make_photos.py" "$tmp/photos/val" 32; } >"$tmp/mk.log" 2>&1; then
  echo "scripts/make_photos.py failed (pillow, numpy, scikit-image): skipped"; tail -n 2 "$tmp/mk.log"
  [ $fails -eq 0 ] && exit 77
  exit 1
fi
printf '[model]\nimage_size = 96\npatch_size = 16\nnum_classes = 9\ndepth = 2\n[train]\nbatch_size = 32\nepochs = 2\nwarmup_epochs = 1\nseed = 5\n[data]\ndataset = imagefolder\npath = %s/photos\n' "$tmp" >"$tmp/p.cfg"
run() {  # run NAME WANT ENV... -- ARGS...
  local name=$1 want=$2; shift 2
  local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  rm -rf "$tmp/run"
  env "${envs[@]}" "$hgrn" "$@" >"$tmp/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL $name: exit $rc: $(tail -n 1 "$tmp/$name.log")"; fails=$((fails + 1)); return
  fi
  local n; n=$(grep -c "data.input_sms" "$tmp/$name.log")
  if [ "$n" -ne 1 ] || ! grep -q "$want" "$tmp/$name.log"; then
    echo "FAIL $name: want one line with '$want', got:"; grep "data.input_sms" "$tmp/$name.log"; fails=$((fails + 1))
  else
    echo "ok   $name: $(grep "data.input_sms" "$tmp/$name.log")"
  fi
}
run split "8 SMs for the input pipeline" HGRN_X=1 -- train --config "$tmp/p.cfg" --out "$tmp/run" --device cuda \
  --data.decode gpu --data.input_sms 8
run auto "img/s sharing every SM: " HGRN_X=1 -- train --config "$tmp/p.cfg" --out "$tmp/run" --device cuda \
  --data.decode gpu --data.input_sms auto
run fallback "no SM split (HGRN_FAULT names no-green-contexts)" HGRN_FAULT=no-green-contexts -- train --config "$tmp/p.cfg" \
  --out "$tmp/run" --device cuda --data.decode gpu --data.input_sms auto
# the hardware work queues (cli_gpu_input_queues): 32 unless the environment says otherwise, in the
# epoch summary's GPU input line
queues() {  # queues LOG WANT
  if grep -q "GPU input per batch.*; CUDA_DEVICE_MAX_CONNECTIONS $2\$" "$tmp/$1.log"; then
    echo "ok   $1: CUDA_DEVICE_MAX_CONNECTIONS $2 in the GPU input line"
  else
    echo "FAIL $1: want CUDA_DEVICE_MAX_CONNECTIONS $2 in the GPU input line, got:"
    grep "GPU input per batch" "$tmp/$1.log" | tail -n 1; fails=$((fails + 1))
  fi
}
queues split 32
run user_queues "8 SMs for the input pipeline" CUDA_DEVICE_MAX_CONNECTIONS=4 -- train --config "$tmp/p.cfg" \
  --out "$tmp/run" --device cuda --data.decode gpu --data.input_sms 8
queues user_queues 4
run bench "for training (green contexts)" HGRN_X=1 -- bench --config "$tmp/p.cfg" --device cuda --steps 5 --data.input_sms 8
[ $fails -eq 0 ] && echo "all passed"
[ $fails -eq 0 ]
