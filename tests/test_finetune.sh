#!/usr/bin/env bash
# `hgrn train --init CKPT` (fine-tuning) through the real command line, on a
# small synthetic ImageFolder tree. The tuned runs train with lr 0 (AdamW then
# leaves every weight bit for bit as it was), so their step-1 checkpoint holds
# exactly the weights the run started from:
#  a. the same config: every tensor bit-equal to the source, a fresh optimizer
#     (state at step 1, epoch 0), the source recorded in every checkpoint of
#     the run (weights and state) and shown by `hgrn info --ckpt`;
#  b. another class count: the head is listed (name, checkpoint shape, model
#     shape), holds what a fresh run from the seed holds, the rest the source's;
#  c. model.image_size 224 -> 288 (another patch grid): takes every tensor, trains;
#  d. --init.exclude: the matching tensors listed and fresh, the rest the source's;
#  e. refusals, exit 2 with one line and nothing written: --init with --resume,
#     a missing, a truncated and a NaN-holding file, a pattern matching nothing,
#     another token mixer, a model tensor the checkpoint lacks (accepted once
#     excluded); a bad --init with --overwrite leaves the run there as it was.
# usage: test_finetune.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
command -v python3 >/dev/null || { echo "skip: python3 not installed"; exit 77; }
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT; echo "work dir $tmp"
fails=0; passed=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# compare.py A B [exclude globs...]: tensors in both with the same shape; prints
# "same N", then "differ NAME" / "shape NAME" per tensor not bit-equal; the
# globs name tensors left out. meta.py FILE KEY prints a metadata value.
cat >"$tmp/st.py" <<'PY'
import fnmatch, json, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n)); body = f.read()
    meta = head.pop("__metadata__", {})
    return {k: (v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in head.items()}, meta
cmd = sys.argv[1]
if cmd == "compare":
    a, _ = load(sys.argv[2]); b, _ = load(sys.argv[3]); globs = sys.argv[4:]
    same = 0
    for k in sorted(b):
        if any(fnmatch.fnmatchcase(k, g) for g in globs): continue
        if k not in a: print("missing", k); continue
        if a[k][0] != b[k][0]: print("shape", k); continue
        if a[k][1] == b[k][1]: same += 1
        else: print("differ", k)
    print("same", same)
elif cmd == "meta":
    print(load(sys.argv[2])[1].get(sys.argv[3], "(none)"))
elif cmd == "scalar":   # an I64 scalar of a state file
    print(struct.unpack("<q", load(sys.argv[2])[0][sys.argv[3]][1])[0])
elif cmd == "nan":      # copy with one NaN in the first F32 tensor
    data = bytearray(open(sys.argv[2], "rb").read())
    n = struct.unpack("<Q", data[:8])[0]; head = json.loads(data[8:8 + n])
    k = next(k for k, v in head.items() if k != "__metadata__" and v["dtype"] == "F32")
    o = 8 + n + head[k]["data_offsets"][0] + 4
    data[o:o + 4] = struct.pack("<f", float("nan"))
    open(sys.argv[3], "wb").write(bytes(data))
PY
st() { python3 "$tmp/st.py" "$@"; }

"$hgrn" bench-data --synth "$tmp/synth" 24 64x48 >/dev/null 2>&1 || { echo "FAIL bench-data --synth"; exit 1; }
for k in 2 3; do
  for s in train val; do for c in $(seq 1 $k); do mkdir -p "$tmp/tree$k/$s/c$c"; done; done
  i=0
  for f in "$tmp"/synth/*.jpg; do
    c=$((i % k + 1)); s=$([ $((i / k % 2)) = 0 ] && echo train || echo val)
    cp "$f" "$tmp/tree$k/$s/c$c/$i.jpg"; i=$((i + 1))
  done
done
base=(--config "$src/configs/fmnist_hgrn1_tiny.cfg" --device cpu --threads 1 --data.dataset imagefolder
      --model.channels 3 --model.patch_size 8 --model.image_size 32 --model.dim 8 --model.depth 1 --model.glu_dim 8
      --data.mean 0.5,0.5,0.5 --data.std 0.25,0.25,0.25 --data.class_names "" --train.batch_size 2
      --train.log_every 1 --train.seed 3)
tuned=(--train.lr 0 --train.min_lr 0 --train.warmup_lr 0 --train.max_steps 1)
run() {  # run NAME ARGS...: train into $tmp/NAME, log in $tmp/NAME.log, exit status in $rc
  local name=$1; shift
  "$hgrn" train "${base[@]}" --out "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1; rc=$?
}
check_same() {  # check_same WHAT A B WANT_SAME [globs]: every compared tensor bit-equal, WANT_SAME of them
  local what=$1 a=$2 b=$3 want=$4; shift 4
  local out; out=$(st compare "$a" "$b" "$@")
  if [ "$out" = "same $want" ]; then return 0; fi
  fail "$what: want all $want tensors bit-equal, got: $(printf '%s' "$out" | tr '\n' ' ')"; return 1
}
run src --data "$tmp/tree2" --model.num_classes 2 --train.epochs 2
[ $rc = 0 ] || { fail "source run: exit $rc: $(tail -1 "$tmp/src.log")"; exit 1; }
S=$tmp/src/last.safetensors
ntensors=$(st compare "$S" "$S" | awk '/^same/{print $2}')

# ---- a. the same config ----
run a --data "$tmp/tree2" --model.num_classes 2 --train.epochs 2 --init "$S" "${tuned[@]}"
if [ $rc != 0 ]; then fail "a: exit $rc: $(tail -1 "$tmp/a.log")"
else
  ok=1
  check_same "a: last.safetensors against the source" "$tmp/a/last.safetensors" "$S" "$ntensors" || ok=0
  # and a run from the seed is not the source: the comparison can tell them apart
  run fresh2 --data "$tmp/tree2" --model.num_classes 2 --train.epochs 2 "${tuned[@]}"
  out=$(st compare "$tmp/fresh2/last.safetensors" "$S")
  printf '%s\n' "$out" | grep -q '^differ' || { fail "a: a fresh run equals the source"; ok=0; }
  [ "$(st scalar "$tmp/a/last.state.safetensors" step)" = 1 ] && [ "$(st scalar "$tmp/a/last.state.safetensors" epoch)" = 0 ] ||
    { fail "a: the tuned run's state is not at step 1, epoch 0 (a fresh schedule)"; ok=0; }
  srcstep=$(st meta "$S" step)
  for f in last.safetensors last.state.safetensors best.safetensors; do
    m=$(st meta "$tmp/a/$f" hgrn_init_source)
    [ "$m" = "$(cd "$tmp/src" && pwd -P)/last.safetensors (step $srcstep)" ] || { fail "a: $f: hgrn_init_source '$m'"; ok=0; }
  done
  [ "$(st meta "$S" hgrn_init_source)" = "(none)" ] || { fail "a: the source run records an init source"; ok=0; }
  info=$("$hgrn" info --ckpt "$tmp/a/last.safetensors" 2>&1)
  printf '%s\n' "$info" | grep -q "^weights from: .*/src/last.safetensors (step $srcstep)" ||
    { fail "a: info --ckpt does not show the source"; ok=0; }
  grep -q "^--init: weights from .*: $ntensors of $ntensors tensors taken, 0 re-initialised" "$tmp/a.log" ||
    { fail "a: no summary line: $(grep -- '^--init' "$tmp/a.log")"; ok=0; }
  # a resumed fine-tuning run keeps saying where it started
  "$hgrn" train "${base[@]}" --out "$tmp/a" --data "$tmp/tree2" --model.num_classes 2 --train.epochs 2 \
    --train.lr 0 --train.min_lr 0 --train.warmup_lr 0 --train.max_steps 2 --resume >"$tmp/a2.log" 2>&1 ||
    { fail "a: resume: $(tail -1 "$tmp/a2.log")"; ok=0; }
  [ "$(st meta "$tmp/a/last.safetensors" hgrn_init_source)" = "$m" ] || { fail "a: resumed checkpoint lost the source"; ok=0; }
  [ $ok = 1 ] && { echo "ok   a: same config: $ntensors tensors bit-equal at step 0, fresh optimizer, source recorded"; passed=$((passed + 1)); }
fi

# ---- b. another class count ----
run b --data "$tmp/tree3" --model.num_classes 3 --train.epochs 2 --init "$S" "${tuned[@]}"
run fresh3 --data "$tmp/tree3" --model.num_classes 3 --train.epochs 2 "${tuned[@]}"
if [ $rc != 0 ] || [ ! -f "$tmp/b/last.safetensors" ]; then fail "b: $(tail -1 "$tmp/b.log") / $(tail -1 "$tmp/fresh3.log")"
else
  ok=1
  grep -qx -- "--init: head.1.weight: checkpoint \[2, 8\], model \[3, 8\]: re-initialised" "$tmp/b.log" &&
    grep -qx -- "--init: head.1.bias: checkpoint \[2\], model \[3\]: re-initialised" "$tmp/b.log" ||
    { fail "b: the head is not listed: $(grep -- '^--init' "$tmp/b.log" | tr '\n' ' ')"; ok=0; }
  [ "$(grep -c -- 're-initialised$' "$tmp/b.log")" = 2 ] || { fail "b: other tensors listed"; ok=0; }
  check_same "b: all but the head against the source" "$tmp/b/last.safetensors" "$S" $((ntensors - 2)) 'head.1.*' || ok=0
  # the head is what a fresh run from the seed gives it (lr 0 keeps it)
  out=$(st compare "$tmp/b/last.safetensors" "$tmp/fresh3/last.safetensors" | grep -E '^(same|differ)')
  printf '%s\n' "$out" | grep -q '^differ head' && { fail "b: the head differs from a fresh run's"; ok=0; }
  [ $ok = 1 ] && { echo "ok   b: 2 -> 3 classes: head listed and fresh, the rest bit-equal"; passed=$((passed + 1)); }
fi

# ---- c. another image size: 224 -> 288, patch 32 (7x7 -> 9x9 patches) ----
big=(--data "$tmp/tree2" --model.num_classes 2 --model.patch_size 32 --train.epochs 1 --train.max_steps 2)
run c224 "${big[@]}" --model.image_size 224
run c288 "${big[@]}" --model.image_size 288 --init "$tmp/c224/last.safetensors" \
  --train.lr 0 --train.min_lr 0 --train.warmup_lr 0
if [ $rc != 0 ]; then fail "c: 224 -> 288: exit $rc: $(tail -1 "$tmp/c288.log")"
else
  ok=1
  check_same "c: 288 against 224" "$tmp/c288/last.safetensors" "$tmp/c224/last.safetensors" "$ntensors" || ok=0
  grep -q "^done: 2 steps" "$tmp/c288.log" || { fail "c: the 288 run did not train 2 steps"; ok=0; }
  grep -q "re-initialised$" "$tmp/c288.log" && { fail "c: a tensor was re-initialised"; ok=0; }
  [ $ok = 1 ] && { echo "ok   c: image size 224 -> 288: every tensor taken, trains"; passed=$((passed + 1)); }
fi

# ---- d. --init.exclude ----
run d --data "$tmp/tree2" --model.num_classes 2 --train.epochs 2 --init "$S" --init.exclude 'layers.0.feature_mixer.*' \
  --init.exclude=lower_bounds "${tuned[@]}"
if [ $rc != 0 ]; then fail "d: exit $rc: $(tail -1 "$tmp/d.log")"
else
  ok=1
  [ "$(grep -c -- "re-initialised (--init.exclude 'layers.0.feature_mixer.\*')$" "$tmp/d.log")" = 6 ] &&
    grep -qx -- "--init: lower_bounds \[1, 8\]: re-initialised (--init.exclude 'lower_bounds')" "$tmp/d.log" ||
    { fail "d: listing: $(grep -- '^--init' "$tmp/d.log" | tr '\n' ' ')"; ok=0; }
  check_same "d: the rest against the source" "$tmp/d/last.safetensors" "$S" $((ntensors - 7)) \
    'layers.0.feature_mixer.*' lower_bounds || ok=0
  check_same "d: the excluded against a fresh run" "$tmp/d/last.safetensors" "$tmp/fresh2/last.safetensors" 7 \
    'head*' 'to_patch*' 'layers.0.token*' 'layers.0.feature_norm*' || ok=0
  [ $ok = 1 ] && { echo "ok   d: --init.exclude: 7 tensors fresh and listed, the rest bit-equal"; passed=$((passed + 1)); }
fi

# ---- e. refusals ----
st nan "$S" "$tmp/nan.safetensors"
head -c 2000 "$S" >"$tmp/short.safetensors"
refuse() {  # refuse WHAT PATTERN ARGS...: exit 2, one line matching PATTERN, no run directory
  local what=$1 pat=$2; shift 2
  rm -rf "$tmp/e"
  "$hgrn" train "${base[@]}" --out "$tmp/e" --data "$tmp/tree2" --model.num_classes 2 "$@" >"$tmp/e.log" 2>&1; rc=$?
  if [ $rc = 2 ] && [ "$(wc -l <"$tmp/e.log")" = 1 ] && grep -q -- "$pat" "$tmp/e.log" && [ ! -e "$tmp/e" ]; then
    echo "ok   e: $what: $(cat "$tmp/e.log")"; passed=$((passed + 1))
  else
    fail "e: $what: exit $rc (want 2, one line matching '$pat', no run directory): $(head -3 "$tmp/e.log")"
  fi
}
refuse "with --resume" "give one of them" --init "$S" --resume
refuse "missing file" "nope.safetensors" --init "$tmp/nope.safetensors"
refuse "truncated file" "short.safetensors" --init "$tmp/short.safetensors"
refuse "NaN in a tensor" "holds NaN" --init "$tmp/nan.safetensors"
refuse "pattern matching nothing" "'head.9.\*' matches no tensor" --init "$S" --init.exclude 'head.9.*'
refuse "another mixer" "token mixer hgru1" --init "$S" --model.mixer hgru2 --model.head_size 4
refuse "a model tensor missing" "'layers.1.token_norm.weight' of the model is missing" --init "$S" --model.depth 2
refuse "exclude without init" "goes with --init" --init.exclude 'head.*'
run deeper --data "$tmp/tree2" --model.num_classes 2 --train.epochs 1 --train.max_steps 1 --model.depth 2 \
  --init "$S" --init.exclude 'layers.1.*'
[ $rc = 0 ] && echo "ok   e: depth 1 -> 2 with the new layer excluded trains" && passed=$((passed + 1)) ||
  fail "e: depth 2 with layers.1.* excluded: $(tail -1 "$tmp/deeper.log")"
# a bad --init with --overwrite is refused before the run there is cleared
before=$(md5sum <"$tmp/fresh2/last.safetensors")
"$hgrn" train "${base[@]}" --out "$tmp/fresh2" --data "$tmp/tree2" --model.num_classes 2 --overwrite \
  --init "$S" --model.depth 2 >"$tmp/ow.log" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(md5sum <"$tmp/fresh2/last.safetensors")" = "$before" ] &&
  echo "ok   e: --overwrite with a checkpoint that does not fit: refused, the run kept" && passed=$((passed + 1)) ||
  fail "e: --overwrite --init (depth 2): exit $rc, run $([ -f "$tmp/fresh2/last.safetensors" ] && echo kept || echo lost)"

echo "$passed passed, $fails failed"
[ $fails = 0 ]
