#!/usr/bin/env bash
# hgrn export onnx: for every token mixer and the variants the configs use
# (causal, the 2-D scan, batch norm, the head norms, an RGB model, float
# input), a tiny checkpoint (d 16, depth 2, one training step on
# Fashion-MNIST) with every tensor then replaced by random values
# (tests/onnx_export_check.py perturb), exported; the graph passes
# onnx.checker (full check) with one Scan per direction, layer and scan
# order; its logits on random uint8 images equal `hgrn forward`'s within
# 1e-4 relative (max |onnx - hgrn| / max |hgrn|, printed per case) on
# onnxruntime where it is installed, else onnx's ReferenceEvaluator (onnx
# 1.13+), and a model with HGRU1's two rotations exchanged is told apart.
# Then the refusals: bad arguments exit 2 with one line and write nothing,
# an unreadable checkpoint or one with a tensor the model does not have
# exits 1 naming it. Needs python3-onnx (exit 77 without it); the parity
# is skipped (exit 77 after every other check passed) where no runtime is
# importable, as with Debian's python3-onnx 1.12.
# usage: test_onnx_export.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$(realpath "$1"); src=$2
# the checks' python3: the first of python3 on the PATH and /usr/bin/python3
# that has onnxruntime, else onnx's ReferenceEvaluator, else onnx alone
py=
for want in 'import onnx, numpy, onnxruntime' 'import onnx, numpy, onnx.reference' 'import onnx, numpy'; do
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c "$want" >/dev/null 2>&1; then py=$p; break 2; fi
  done
done
if [ -z "$py" ]; then
  echo "no python3 with onnx (apt-get install python3-onnx): skipped"
  exit 77
fi
check="$src/tests/onnx_export_check.py"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

runtime=$("$py" "$check" runtime); have_rt=$?
if [ $have_rt -eq 0 ]; then echo "parity on $runtime"; else echo "no onnxruntime, no onnx.reference: parity will be skipped"; fi

tiny=(--device cpu --threads 1 --model.dim 16 --model.depth 2 --model.glu_dim 32 --train.max_steps 1
      --data.train_limit 256 --data.val_limit 64)
# name | config | overrides | Scan nodes (2 layers x directions x scan orders) | export options
# another opset than the default: the newest the installed onnx writes, up to
# 21 (IR version 10), which every onnxruntime since 1.18 loads; a newer onnx's
# newest opset needs an IR version that the runtime beside it may not read yet
# (on the GPU machine the onnx's newest needs IR 14; its onnxruntime 1.30 reads up to 13)
newer_opset=$("$py" -c 'import onnx.defs; print(min(onnx.defs.onnx_opset_version(), 21))')
cases="hgru1|fmnist_hgrn1_tiny||4|
hgru2|fmnist_hgrn2_tiny|--model.head_size 8|4|
lru|fmnist_lru_tiny|--model.rnn_dim 12|4|
mingru|fmnist_mingru_tiny|--model.rnn_dim 12|4|
minlstm|fmnist_minlstm_tiny|--model.rnn_dim 12|4|
lru_causal|fmnist_lru_tiny|--model.causal 1|2|
minlstm_causal_2d|fmnist_minlstm_tiny|--model.causal 1 --model.scan2d 1 --model.head_norm none|4|
hgru1_2d_batchnorm|fmnist_hgrn1_tiny|--model.scan2d 1 --model.norm batch --model.head_norm token|8|
hgru2_2d|fmnist_hgrn2_tiny|--model.head_size 8 --model.scan2d 1 --model.head_norm none|8|
mingru_2d_batchnorm|fmnist_mingru_tiny|--model.scan2d 1 --model.norm batch --model.head_norm token|8|
hgru1_float_opset|fmnist_hgrn1_tiny||4|--input float --opset $newer_opset
lru_rgb|fmnist_lru_tiny|--model.rnn_dim 12|4|"
skipped=0
while IFS='|' read -r name cfg over scans opts; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086
  if ! "$hgrn" train --config "$src/configs/$cfg.cfg" "${tiny[@]}" $over --out "$tmp/run_$name" >"$tmp/train.log" 2>&1; then
    fail "$name: training the tiny checkpoint:"; tail -n 3 "$tmp/train.log"; continue
  fi
  ckpt=$tmp/$name.safetensors
  extra=; [ "${name%_rgb}" != "$name" ] && extra=rgb
  "$py" "$check" perturb "$tmp/run_$name/last.safetensors" "$ckpt" 11 $extra || { fail "$name: perturb"; continue; }
  # shellcheck disable=SC2086
  if ! "$hgrn" export onnx "$ckpt" "$tmp/$name.onnx" $opts >"$tmp/export.out" 2>&1; then
    fail "$name: export:"; cat "$tmp/export.out"; continue
  fi
  "$py" "$check" check "$tmp/$name.onnx" "$scans" || { fail "$name: check"; continue; }
  float=; [ "${opts#--input float}" != "$opts" ] && float=--float
  "$py" "$check" parity "$hgrn" "$ckpt" "$tmp/$name.onnx" "$name" $float; rc=$?
  if [ $rc -eq 77 ]; then skipped=$((skipped + 1)); elif [ $rc -ne 0 ]; then fails=$((fails + 1)); fi
done <<<"$cases"

# the comparison can fail: HGRU1's forward and reverse rotations exchanged
if [ -e "$tmp/hgru1.onnx" ] && [ $have_rt -eq 0 ]; then
  "$py" "$check" perturb "$tmp/run_hgru1/last.safetensors" "$tmp/swapped.safetensors" 11 \
    layers.1.token_mixer.theta_forward layers.1.token_mixer.theta_reverse &&
  "$hgrn" export onnx "$tmp/swapped.safetensors" "$tmp/swapped.onnx" >/dev/null &&
  "$py" "$check" parity "$hgrn" "$tmp/hgru1.safetensors" "$tmp/swapped.onnx" hgru1-swapped-rotations --expect-differ ||
    fails=$((fails + 1))
fi

# refusals: one line on stderr, the exit code, nothing written
expect_error() {  # NAME CODE PATTERN -- ARGS...
  local name=$1 code=$2 pat=$3; shift 4
  rm -f "$tmp/o.onnx"
  "$hgrn" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -ne "$code" ] || ! grep -qE -- "$pat" "$tmp/err" || [ "$(wc -l <"$tmp/err")" -ne 1 ] ||
     [ -e "$tmp/o.onnx" ] || ls "$tmp"/o.onnx.* >/dev/null 2>&1; then
    fail "$name (exit $rc, want $code):"; cat "$tmp/err"; return
  fi
  echo "ok   $name: $(cat "$tmp/err")"
}
good=$tmp/hgru2.safetensors
expect_error no-format 2 "the format is required" -- export
expect_error unknown-format 2 "unknown format 'tflite'" -- export tflite "$good" "$tmp/o.onnx"
expect_error no-args 2 "CKPT and OUT.onnx are required" -- export onnx
expect_error one-arg 2 "CKPT and OUT.onnx are required" -- export onnx "$good"
expect_error stray-arg 2 "unexpected argument 'extra'" -- export onnx "$good" "$tmp/o.onnx" extra
expect_error unknown-option 2 "unknown option --frobnicate" -- export onnx "$good" "$tmp/o.onnx" --frobnicate
expect_error bad-input 2 "--input rgb: must be uint8 or float" -- export onnx "$good" "$tmp/o.onnx" --input rgb
expect_error input-no-value 2 "--input needs a value" -- export onnx "$good" "$tmp/o.onnx" --input
expect_error old-opset 2 "--opset 16: must be 17" -- export onnx "$good" "$tmp/o.onnx" --opset 16
expect_error future-opset 2 "--opset 999: must be 17 .* to [0-9]+" -- export onnx "$good" "$tmp/o.onnx" --opset 999
expect_error bad-opset 2 "--opset x: not an integer" -- export onnx "$good" "$tmp/o.onnx" --opset x
expect_error missing-ckpt 2 "$tmp/none.safetensors: no such file" -- export onnx "$tmp/none.safetensors" "$tmp/o.onnx"
expect_error ckpt-dir 2 "$tmp: not a file" -- export onnx "$tmp" "$tmp/o.onnx"
expect_error out-no-dir 2 "directory $tmp/nodir does not exist" -- export onnx "$good" "$tmp/nodir/o.onnx"
expect_error out-is-dir 2 "$tmp: is a directory" -- export onnx "$good" "$tmp"
echo "not a checkpoint" >"$tmp/text.safetensors"
expect_error not-safetensors 1 "text.safetensors: not a safetensors file" -- export onnx "$tmp/text.safetensors" "$tmp/o.onnx"
"$py" - "$good" "$tmp/extra.safetensors" "$check" <<'PY' || fail "making a checkpoint with an extra tensor"
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("chk", sys.argv[3]); chk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chk)
t, meta = chk.read_st(sys.argv[1])
t["layers.0.token_mixer.skip.weight"] = np.ones((16,), np.float32)
chk.write_st(sys.argv[2], t, meta)
PY
expect_error unknown-tensor 1 "tensor 'layers.0.token_mixer.skip.weight' is not part of the model" -- export onnx "$tmp/extra.safetensors" "$tmp/o.onnx"
"$py" - "$good" "$tmp/mixer.safetensors" "$check" <<'PY' || fail "making a checkpoint with another mixer"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("chk", sys.argv[3]); chk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chk)
t, meta = chk.read_st(sys.argv[1])
meta["config"] = meta["config"].replace('mixer = "hgru2"', 'mixer = "mamba"')
chk.write_st(sys.argv[2], t, meta)
PY
expect_error unknown-mixer 1 "model.mixer = mamba cannot be exported" -- export onnx "$tmp/mixer.safetensors" "$tmp/o.onnx"

if [ $fails -ne 0 ]; then echo "$fails failed"; exit 1; fi
if [ $skipped -ne 0 ]; then
  echo "everything else passed; parity skipped ($skipped cases): neither onnxruntime nor onnx.reference (onnx 1.13+) is importable"
  exit 77
fi
echo "all passed"
