#!/usr/bin/env bash
# Bad input through the real command line: each case must exit non-zero with
# one line naming the key or file, and write nothing half-way; refusals
# before any work (flags, paths, --gpus without a GPU, --top beyond the
# model's classes) exit 2.
# usage: test_cli_errors.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; n=0
cfg=$src/configs/fmnist_hgrn1_tiny.cfg

# expect_error NAME PATTERN -- COMMAND...: non-zero exit, the output matches
# PATTERN (stderr, or stdout where classify answers a bad file in place)
expect_error() {
  local name=$1 pat=$2; shift 3
  n=$((n + 1))
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 0 ]; then echo "FAIL $name: exit 0"; fails=$((fails + 1)); return; fi
  if ! cat "$tmp/err" "$tmp/out" | grep -qE -- "$pat"; then
    echo "FAIL $name: the output does not match /$pat/:"; cat "$tmp/err" "$tmp/out"; fails=$((fails + 1)); return
  fi
  echo "ok   $name: $(cat "$tmp/err" "$tmp/out" | grep -E -- "$pat" | head -n 1)"
}

# expect_rc NAME RC PATTERN -- COMMAND...: exit status RC exactly, one stderr line
# matching PATTERN (refusals before any work exit 2), nothing on stdout
expect_rc() {
  local name=$1 want=$2 pat=$3; shift 4
  n=$((n + 1))
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -ne "$want" ]; then echo "FAIL $name: exit $rc, want $want: $(head -3 "$tmp/err")"; fails=$((fails + 1)); return; fi
  if [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qE -- "$pat" "$tmp/err" || [ -s "$tmp/out" ]; then
    echo "FAIL $name: want one stderr line /$pat/ and no stdout:"; cat "$tmp/err" "$tmp/out"; fails=$((fails + 1)); return
  fi
  echo "ok   $name (exit $rc): $(cat "$tmp/err")"
}

expect_error bad-value "model.dim" -- "$hgrn" info --config "$cfg" --model.dim -3
expect_error unknown-key "model.colour" -- "$hgrn" info --config "$cfg" --model.colour 3
expect_error unknown-flag "--frobnicate" -- "$hgrn" train --config "$cfg" --frobnicate 1
printf '[model]\ndim = 12abc\n' >"$tmp/bad.cfg"
expect_error bad-config-file "bad.cfg:2.*model.dim" -- "$hgrn" info --config "$tmp/bad.cfg"
printf '[model]\nwidth = 12\n' >"$tmp/unk.cfg"
expect_error unknown-config-key "unk.cfg:2.*model.width" -- "$hgrn" info --config "$tmp/unk.cfg"
expect_error missing-config "nope.cfg" -- "$hgrn" info --config "$tmp/nope.cfg"
expect_error missing-dataset "$tmp/no_data" -- "$hgrn" train --config "$cfg" --device cpu --data "$tmp/no_data" --out "$tmp/run1"
[ -e "$tmp/run1" ] && { echo "FAIL missing-dataset created its run directory"; fails=$((fails + 1)); }
expect_error patch-divides "patch_size" -- "$hgrn" info --config "$cfg" --model.patch_size 5
expect_error missing-ckpt "$tmp/none.safetensors" -- "$hgrn" eval --ckpt "$tmp/none.safetensors" --device cpu
echo "not a checkpoint" >"$tmp/junk.safetensors"
expect_error junk-ckpt "junk.safetensors" -- "$hgrn" classify --ckpt "$tmp/junk.safetensors" --device cpu "$cfg"
expect_error unknown-command "unknown command 'frobnicate'" -- "$hgrn" frobnicate
expect_error misspelt-command "unknown command 'evl' \(did you mean 'eval'\?\)" -- "$hgrn" evl
# stray arguments and misspelt options name themselves (and the nearest valid option)
expect_error eval-stray-arg "unexpected argument 'extra_arg'" -- "$hgrn" eval --ckpt "$tmp/none.safetensors" extra_arg
expect_error train-stray-arg "unexpected argument 'bogus'" -- "$hgrn" train --config "$cfg" --device cpu --out "$tmp/run0" bogus
[ -e "$tmp/run0" ] && { echo "FAIL train-stray-arg created its run directory"; fails=$((fails + 1)); }
expect_error misspelt-flag "unknown option --ckp \(did you mean --ckpt\?" -- "$hgrn" eval --ckp x
expect_error misspelt-key "unknown option --train.lrr \(did you mean --train.lr\?" -- "$hgrn" train --config "$cfg" --train.lrr 1
expect_error bare-key "unknown option --lr \(did you mean --train.lr\?" -- "$hgrn" train --config "$cfg" --lr 1
printf '[train]\nlrr = 1\n' >"$tmp/typo.cfg"
expect_error misspelt-config-key "typo.cfg:2: unknown key 'train.lrr' \(did you mean 'train.lr'\?\)" -- "$hgrn" info --config "$tmp/typo.cfg"
expect_error bench-data-option "unknown option --thread \(did you mean --threads\?" -- "$hgrn" bench-data "$tmp" --thread 2
# every command parses with cli_parse: a misspelt option is refused (2) before
# any work, named with the nearest option the command takes, even as the last word
expect_rc bench-data-option-last 2 "^bench-data: unknown option --thread \(did you mean --threads\?" -- "$hgrn" bench-data "$tmp" --thread
expect_rc plot-option 2 "^hgrn plot: unknown option --dpi \(see --help\)$" -- "$hgrn" plot "$tmp" --dpi 300
expect_rc export-option 2 "^hgrn export: unknown option --opst \(did you mean --opset\?" -- "$hgrn" export onnx "$tmp/x.safetensors" "$tmp/x.onnx" --opst 18
expect_rc prepare-shards-option 2 "^hgrn prepare shards: unknown option --max-sid \(did you mean --max-side\?" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --max-sid 384
[ -e "$tmp/sh" ] && { echo "FAIL prepare-shards-option created $tmp/sh"; fails=$((fails + 1)); }
expect_rc prepare-index-option 2 "^hgrn prepare index: unknown option --splt \(did you mean --split\?" -- "$hgrn" prepare index "$tmp" --splt train
expect_rc prepare-shards-key 2 "^hgrn prepare shards: unknown option --train.lr \(see --help\)$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --train.lr 1
# prepare shards' numbers: text that is not one is named as such, a number beyond the range as out of range
expect_rc shards-max-side-text 2 "^hgrn prepare shards: --max-side 'abc': not a whole number \(range \[0, 65500\]\)$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --max-side abc
expect_rc shards-quality-text 2 "^hgrn prepare shards: --quality '9x': not a whole number \(range \[1, 100\]\)$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --quality 9x
expect_rc shards-mb-empty 2 "^hgrn prepare shards: --shard-mb '': not a number \(range \[0.01, 1048576\]\)$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --shard-mb ''
expect_rc shards-mb-nan 2 "^hgrn prepare shards: --shard-mb 'nan': not a number" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --shard-mb nan
expect_rc shards-threads-frac 2 "^hgrn prepare shards: --threads '2.5': not a whole number \(range \[1, 4096\]\)$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --threads 2.5
expect_rc shards-threads-hex 2 "^hgrn prepare shards: --threads '0x8': not a whole number" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --threads 0x8
expect_rc shards-max-side-range 2 "^hgrn prepare shards: --max-side 70000 is out of range \[0, 65500\]$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --max-side 70000
expect_rc shards-quality-range 2 "^hgrn prepare shards: --quality 0 is out of range \[1, 100\]$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --quality 0
expect_rc shards-mb-range 2 "^hgrn prepare shards: --shard-mb 0.001 is out of range \[0.01, 1048576\]$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --shard-mb 0.001
expect_rc shards-threads-range 2 "^hgrn prepare shards: --threads 1e9 is out of range \[1, 4096\]$" -- "$hgrn" prepare shards "$tmp" "$tmp/sh" --threads 1e9
[ -e "$tmp/sh" ] && { echo "FAIL a refused prepare shards created $tmp/sh"; fails=$((fails + 1)); }
# every numeric flag's error names its range
expect_error eval-batch-range "--batch 100000000 is out of range \[1, 16777216\]" -- "$hgrn" eval --ckpt x --batch 100000000
expect_error eval-batch-int "--batch 12x: not an integer \(range \[1, 16777216\]\)" -- "$hgrn" eval --ckpt x --batch 12x
expect_error bench-steps-range "--steps 0 is out of range \[1, 1000000\]" -- "$hgrn" bench --config "$cfg" --steps 0
expect_error info-batch-range "--batch 0 is out of range \[1, 16777216\]" -- "$hgrn" info --config "$cfg" --batch 0
expect_error classify-top-range "--top 0 is out of range \[1, 1000000\]" -- "$hgrn" classify --ckpt x --top 0 a.jpg
expect_error gpus-range "--gpus '0': not a number of GPUs in 1..256" -- "$hgrn" eval --ckpt x --gpus 0
expect_error bench-data-threads "--threads 0 is out of range \[1, 4096\]" -- "$hgrn" bench-data "$tmp" --threads 0
expect_error bench-data-size "--size 4 is out of range \[8, 8192\]" -- "$hgrn" bench-data "$tmp" --size 4
expect_error config-key-range "model.dim = -3 is out of range \[1, 65536\]" -- "$hgrn" info --config "$cfg" --model.dim -3
expect_error json-value "--json takes no value" -- "$hgrn" eval --ckpt x --json=1
expect_error logits-without-json "--logits needs --json" -- "$hgrn" classify --ckpt x --logits a.jpg
expect_error bench-ops-option "unknown option --steps" -- "$hgrn" bench --ops --steps 3
# bench --ops times the op table at its own shapes: a config key is refused, not ignored (before any work)
expect_rc bench-ops-key 2 "^hgrn bench --ops: --model.dim: the op table runs at its own shapes and reads no config key but train.threads \(--threads\)$" -- timeout 60 "$hgrn" bench --ops --device cpu --model.dim 8
expect_rc bench-ops-key-gemm 2 "^hgrn bench --ops: --train.gemm_tune: " -- timeout 60 "$hgrn" bench --ops --device cpu --threads 1 --train.gemm_tune 0
# bench --mixers sweeps every mixer at its own shapes: a config key is refused, not ignored (before the GPU is looked for)
expect_rc bench-mixers-key 2 "^hgrn bench --mixers: --model.dim: the token mixers run at their own shapes and widths and read no config key$" -- timeout 60 "$hgrn" bench --mixers --model.dim 8
expect_rc bench-mixers-key-mixer 2 "^hgrn bench --mixers: --model.mixer: " -- timeout 60 "$hgrn" bench --mixers --precision fp32 --model.mixer lru
# bench-data without DIR is a usage error: one stderr line, exit 2 (its --help goes to stdout, exit 0)
expect_rc bench-data-no-dir 2 "^bench-data: DIR is required \(usage: hgrn bench-data DIR" -- "$hgrn" bench-data
expect_rc bench-data-no-dir-option 2 "^bench-data: DIR is required" -- "$hgrn" bench-data --threads 2
n=$((n + 1))
if "$hgrn" bench-data --help >"$tmp/out" 2>"$tmp/err" && grep -q "^usage: hgrn bench-data DIR" "$tmp/out" && [ ! -s "$tmp/err" ]; then
  echo "ok   bench-data-help: the usage on stdout, exit 0"
else echo "FAIL bench-data-help: want the usage on stdout, nothing on stderr, exit 0"; fails=$((fails + 1)); fi
# prepare names what it cannot prepare, and what it can
prep_pat="^hgrn prepare: cifar10 is not a dataset hgrn prepare writes: it prepares fmnist .*cifar-like fmnist .*shards"
"$hgrn" prepare cifar10 "$tmp/p" >"$tmp/out" 2>"$tmp/err"; rc=$?; n=$((n + 1))
{ [ $rc -eq 2 ] && head -n 1 "$tmp/err" | grep -qE "$prep_pat" && [ ! -e "$tmp/p" ]; } && echo "ok   prepare-cifar10: $(head -n 1 "$tmp/err")" ||
  { echo "FAIL prepare-cifar10 (exit $rc):"; cat "$tmp/err"; fails=$((fails + 1)); }
expect_rc eval-missing-ckpt 2 "^hgrn eval: --ckpt $tmp/none.safetensors: no such file" -- "$hgrn" eval --ckpt "$tmp/none.safetensors" --device cpu
expect_rc classify-missing-ckpt 2 "^hgrn classify: --ckpt $tmp/none.safetensors: no such file" -- "$hgrn" classify --ckpt "$tmp/none.safetensors" a.jpg
expect_rc eval-confusion-dir 2 "^hgrn eval: --confusion $tmp/no_dir/c.csv: $tmp/no_dir: no such directory" -- "$hgrn" eval --ckpt x --confusion "$tmp/no_dir/c.csv"
mkdir -p "$tmp/idx"; : >"$tmp/idx/t10k-images-idx3-ubyte.gz"
expect_rc bench-data-idx 2 "^bench-data: $tmp/idx: Fashion-MNIST IDX files \(t10k\): bench-data measures decoding JPEG/PNG files" -- "$hgrn" bench-data "$tmp/idx"
expect_rc bench-data-missing 2 "^bench-data: $tmp/none: no such directory" -- "$hgrn" bench-data "$tmp/none"
expect_rc bench-data-config 2 "^bench-data: $tmp/none.cfg: cannot open" -- "$hgrn" bench-data "$tmp" --config "$tmp/none.cfg"
expect_rc prepare-missing-data 2 "^hgrn prepare: --data $tmp/none: no such directory" -- "$hgrn" prepare fmnist "$tmp/p" --data "$tmp/none"
expect_rc forward-missing-inputs 2 "^hgrn forward: --inputs $tmp/none.safetensors: no such file" -- "$hgrn" forward --ckpt "$cfg" --inputs "$tmp/none.safetensors" --out "$tmp/f.out"
expect_rc forward-out-dir 2 "^hgrn forward: --out $tmp/no_dir/f.out: $tmp/no_dir: no such directory" -- "$hgrn" forward --ckpt "$cfg" --inputs "$cfg" --out "$tmp/no_dir/f.out"
expect_rc classify-top-zero 2 "--top 0 is out of range" -- "$hgrn" classify --ckpt x --top 0 a.jpg
if [ "$("$hgrn" device)" = cpu ]; then   # --gpus N runs a process per GPU: said once, before any rank starts
  for cmd in train eval; do
    args=(--config "$cfg" --out "$tmp/g"); [ $cmd = eval ] && args=(--ckpt "$cfg")
    expect_rc "$cmd-gpus-no-device" 2 "^hgrn $cmd: --gpus 2 starts one process per GPU, but there is no CUDA device here .*mpirun -np 2 hgrn $cmd" -- \
      "$hgrn" $cmd --gpus 2 "${args[@]}"
  done
fi
expect_rc train-gpus-device-cpu 2 "^hgrn train: --gpus 2 starts one process per GPU, but --device cpu was given" -- \
  "$hgrn" train --gpus 2 --device cpu --config "$cfg" --out "$tmp/g"
[ -e "$tmp/g" ] && { echo "FAIL --gpus refusals created the run directory"; fails=$((fails + 1)); }
if [ "$("$hgrn" device)" = cpu ]; then   # the kernel timings need the CUDA backend and a GPU: exit 2
  expect_error bench-ops-no-gpu "bench --ops: .*CUDA" -- "$hgrn" bench --ops
  "$hgrn" bench --ops >/dev/null 2>&1; rc=$?
  [ $rc -eq 2 ] || { echo "FAIL bench-ops-no-gpu: exit $rc, not 2"; fails=$((fails + 1)); }
fi
"$hgrn" bench --help | grep -q -- "--ops" || { echo "FAIL bench --help does not document --ops"; fails=$((fails + 1)); }

# a real (tiny, 1-step) checkpoint for the classify cases: trained on Fashion-MNIST
if [ ! -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "$((n - fails)) passed, $fails failed; the checkpoint cases skipped (Fashion-MNIST not installed:" \
       "apt-get install dataset-fashion-mnist)"
  [ $fails -eq 0 ] && exit 77 || exit 1
fi
"$hgrn" train --config "$cfg" --device cpu --out "$tmp/run" --model.dim 8 --model.depth 1 --model.glu_dim 8 \
  --train.max_steps 1 --data.train_limit 256 --data.val_limit 64 >/dev/null 2>&1 || { echo "FAIL tiny train"; exit 1; }
expect_error classify-not-image "fmnist_hgrn1_tiny.cfg.*(not a JPEG or PNG|not an image|unknown)" -- "$hgrn" classify --ckpt "$tmp/run/last.safetensors" --device cpu "$cfg"
expect_rc eval-missing-data 2 "^hgrn eval: --data $tmp/no_data: no such directory" -- "$hgrn" eval --ckpt "$tmp/run/last.safetensors" --device cpu --data "$tmp/no_data"
expect_rc classify-top-classes 2 "--top 11 is out of range \[1, 10\]" -- "$hgrn" classify --ckpt "$tmp/run/last.safetensors" --device cpu --top 11 "$tmp/missing.jpg"
expect_error classify-missing "$tmp/missing.jpg" -- "$hgrn" classify --ckpt "$tmp/run/last.safetensors" --device cpu "$tmp/missing.jpg"
: >"$tmp/empty.jpg"
expect_error classify-empty "empty.jpg" -- "$hgrn" classify --ckpt "$tmp/run/last.safetensors" --device cpu "$tmp/empty.jpg"
expect_error resume-wrong-model "different hgru1 model: model.dim 8 \(the config says 16\)" -- "$hgrn" train --config "$cfg" --device cpu --out "$tmp/run" --resume --allow-changes \
  --model.dim 16 --model.depth 1 --model.glu_dim 8 --data.train_limit 256 --data.val_limit 64

# a loss that turns NaN (lr 10 with weight decay 1 makes the weights blow up):
# a clear error, non-zero exit, and the run's last checkpoint left as it was
sum_before=$(md5sum <"$tmp/run/last.safetensors")
expect_error nan-loss "(loss|the gradient norm) is (NaN|infinite) at step .*last good checkpoint" -- "$hgrn" train --config "$cfg" --device cpu \
  --out "$tmp/run" --resume --allow-changes --model.dim 8 --model.depth 1 --model.glu_dim 8 --data.train_limit 4096 --data.val_limit 64 \
  --train.warmup_epochs 0 --train.lr 10 --train.weight_decay 1 --train.epochs 3 --train.max_steps 0
[ "$(md5sum <"$tmp/run/last.safetensors")" = "$sum_before" ] || { echo "FAIL nan-loss changed last.safetensors"; fails=$((fails + 1)); }

echo "$((n - fails)) passed, $fails failed"
[ $fails -eq 0 ]
