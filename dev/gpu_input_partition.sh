#!/usr/bin/env bash
# gpu_input_partition.sh - on a lent GPU machine, from the repository root
# (after `source .offline-deps/unpack.sh`; Fashion-MNIST's IDX files in
# $FMNIST, default .gpu-fmnist/fashion-mnist): data.decode auto's choice and
# the SM split of data.input_sms.
#   1. build hgrn and the tests below in /tmp/gb (Release, sm_90);
#   2. tests: test_gpu_green, test_gpu_decode_auto, test_loader_gpu_emul,
#      test_gpu_images, test_input_sms.sh;
#   3. the GPU demo's training (scripts/demo.sh's command: 20 epochs, crop +
#      flip) with data.decode auto and cpu, wall time each;
#   4. `hgrn bench` hgrn1_deit_tiny batch 256 with data.input_sms 0 and 8,
#      alternating, ROUNDS times;
#   5. hgrn1_deit_tiny trained from photographs (scripts/make_photos.py,
#      NPHOTO distinct files hard-linked twice), data.decode gpu, batch 256,
#      STEPS steps, data.input_sms 0 and 8: median img/s and data_wait of the
#      metrics records after the first fifth of the steps.
# One table at the end; logs in $OUT.
set -u
OUT=${OUT:-/tmp/gpu_input_partition}; mkdir -p "$OUT"
L=/tmp/gip_logs; rm -rf $L; mkdir -p $L
B=/tmp/gb; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
FMNIST=${FMNIST:-$PWD/.gpu-fmnist/fashion-mnist}
STEPS=${STEPS:-1000}; NPHOTO=${NPHOTO:-4096}; LINKS=${LINKS:-2}; ROUNDS=${ROUNDS:-2}
BENCH_SMS=${BENCH_SMS:-0 8}; JPEG_SMS=${JPEG_SMS:-0 8}
TESTS=${TESTS-test_gpu_green test_gpu_decode_auto test_loader_gpu_emul test_gpu_images}
# TESTS="" builds hgrn alone and skips step 2 but test_input_sms.sh; SKIP_DEMO=1 skips step 3
rows=()
row() { rows+=("$1|$2|$3"); echo "== $1: $2 ($3) at $(el) s"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "host: $(nproc) cores; $(date -u +%FT%TZ); commit $(git rev-parse --short HEAD 2>/dev/null)"
if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >$L/cmake.log 2>&1 &&
       cmake --build $B -j16 --target hgrn $TESTS >$L/build.log 2>&1; }; then
  tail -40 $L/build.log; cp $L/*.log "$OUT/"; exit 1
fi
row build ok "$(el) s"
for t in $TESTS; do
  s=$(date +%s); HGRN_TEST_QUICK=1 timeout 120 $B/$t >$L/$t.log 2>&1; rc=$?
  row $t "rc=$rc" "$(( $(date +%s) - s )) s; $(grep -c '\[  FAILED  \]' $L/$t.log) failed"
  grep -E "SMs|side|nvJPEG|photos|FAIL|Error|error" $L/$t.log | head -12
done
s=$(date +%s); timeout 200 bash tests/test_input_sms.sh $B/hgrn . >$L/test_input_sms.log 2>&1; rc=$?
row test_input_sms.sh "rc=$rc" "$(( $(date +%s) - s )) s"; cat $L/test_input_sms.log | tail -8

# the demo's training, data.decode auto and cpu
tree=/tmp/fmnist_jpeg
[ -n "${SKIP_DEMO:-}" ] || $B/hgrn prepare fmnist $tree --data "$FMNIST" >$L/prepare.log 2>&1 || { row prepare "rc=$?" "$(tail -1 $L/prepare.log)"; }
for dec in $([ -n "${SKIP_DEMO:-}" ] || echo auto cpu); do
  rm -rf /tmp/demo_$dec; s=$(date +%s%N)
  timeout 240 $B/hgrn train --config configs/fmnist_hgrn1_tiny.cfg --data.dataset imagefolder --data $tree \
    --out /tmp/demo_$dec --device cuda --train.epochs 20 --data.crop_padding 2 --data.hflip 0.5 --data.decode $dec \
    >$L/demo_$dec.log 2>&1; rc=$?
  w=$(( ($(date +%s%N) - s) / 1000000 ))
  top=$(grep -o '"val_top1": *[0-9.]*' /tmp/demo_$dec/metrics.jsonl 2>/dev/null | tail -1 | grep -o '[0-9.]*$')
  row "demo train, decode $dec" "rc=$rc" "$w ms wall, last top-1 $top"
  grep "data.decode" $L/demo_$dec.log | head -3
done

# the synthetic bench with and without the split
for r in $(seq 1 $ROUNDS); do
  for sms in $BENCH_SMS; do
    timeout 120 $B/hgrn bench --config configs/hgrn1_deit_tiny.cfg --device cuda --batch 256 --steps 40 \
      --data.input_sms $sms >$L/bench_${sms}_$r.log 2>&1
    row "bench tiny, input_sms $sms, round $r" "rc=$?" "$(grep -E '^train ' $L/bench_${sms}_$r.log | head -1)"
    grep "data.input_sms" $L/bench_${sms}_$r.log
  done
done

# training from photographs
P=/tmp/photos
if [ ! -d $P/train ]; then
  s=$(date +%s)
  python3 scripts/make_photos.py $P/src $NPHOTO >$L/photos.log 2>&1 && python3 scripts/make_photos.py $P/val 256 >>$L/photos.log 2>&1
  mkdir -p $P/train
  for c in $P/src/*/; do n=$(basename $c); mkdir -p $P/train/$n; for f in $c*.jpg; do b=$(basename $f .jpg);
    for k in $(seq 1 $LINKS); do ln $f $P/train/$n/${b}_$k.jpg; done; done; done
  row photos "$(find $P/train -name '*.jpg' | wc -l) files ($NPHOTO distinct)" "$(( $(date +%s) - s )) s, $(du -sh $P/src | cut -f1)"
fi
med() {  # median img/s and data_wait of the records after step $2 in $1
  python3 - "$1" "$2" <<'PY'
import json, sys, statistics
rs = [json.loads(l) for l in open(sys.argv[1]) if '"img_per_s"' in l]
rs = [r for r in rs if r["step"] > int(sys.argv[2])]
if rs: print("median %.0f img/s, data_wait %.3f (%d records)" % (statistics.median(r["img_per_s"] for r in rs),
             statistics.median(r["data_wait"] for r in rs), len(rs)))
else: print("no records")
PY
}
for sms in $JPEG_SMS; do
  rm -rf /tmp/jr_$sms
  timeout 300 $B/hgrn train --config configs/hgrn1_deit_tiny.cfg --data $P --out /tmp/jr_$sms --device cuda \
    --data.decode gpu --train.batch_size 256 --train.max_steps $STEPS --train.log_every 50 --train.epochs 100000 \
    --train.eval_every 100000 --data.input_sms $sms >$L/jpeg_$sms.log 2>&1; rc=$?
  row "jpeg tiny, input_sms $sms, $STEPS steps" "rc=$rc" "$(med /tmp/jr_$sms/metrics.jsonl $((STEPS / 5)))"
  grep -E "data.input_sms|data.decode|GPU input" $L/jpeg_$sms.log | tail -3
done
echo; echo "step|result|detail"; printf '%s\n' "${rows[@]}" | tee $OUT/summary.txt
tar czf $OUT/logs.tgz -C $L .
