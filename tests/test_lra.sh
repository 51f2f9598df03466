#!/usr/bin/env bash
# `hgrn lra` end to end on the CPU, on generated CIFAR-10 binary batches
# (5 x 10,000 training and 10,000 test records, each class its own
# brightness, so that a tiny model learns it within three epochs):
#  1. the lra protocol (gray, 1-D scan, batch norm): trains, evaluates after
#     each epoch with the running statistics (best top-1 >= 50 %, chance is
#     10 %), writes OUT/lra.cfg and the checkpoints; `hgrn eval` reads them,
#     and refuses them as a model with another scan or norm;
#  2. a run stopped mid-epoch (train.max_steps) and resumed ends with the
#     same weights as the uninterrupted one, bit for bit; another mixer's
#     recipe over it is refused (exit 2) with its lra.cfg left byte for byte;
#  3. the hgrn protocol (RGB, crop + flip, 2-D scan) over a config file runs
#     and `hgrn classify` answers a JPEG with the class names of
#     batches.meta.txt;
#  4. one-line errors for a missing recipe, an unknown mixer, protocol or
#     data directory, and a truncated batch;
#  5. with Debian's Fashion-MNIST installed: `hgrn prepare cifar-like
#     fmnist` writes CIFAR-10-sized batches and `--data fmnist32` trains.
# usage: test_lra.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT; echo "work dir $tmp"
fails=0; passed=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; passed=$((passed + 1)); }
# the tensor bytes of a safetensors file (its header also names the
# checkpoint pair, which differs from run to run)
tensor_bytes() { local n; n=$(od -An -t u8 -N 8 "$1" | tr -d ' '); tail -c +$((9 + n)) "$1"; }

# ---- generated CIFAR-10 batches: class c's pixels around 20 + 22 c ----
mkdir -p "$tmp/cifar"
perl -e '
  use strict; my $dir = shift; srand(7); my @var;
  for my $c (0..9) { for my $k (0..15) { my $s = "";
    for my $p (0..2) { for my $q (0..1023) { $s .= chr(20 + 22 * $c + int(rand(16)) + ($q % 32 == $k ? 8 : 0)); } }
    $var[$c][$k] = $s; } }
  sub batch { my ($name, $first) = @_; open(my $f, ">:raw", "$dir/$name") or die "$dir/$name: $!";
    for my $i ($first .. $first + 9999) { my $c = ($i * 7 + int($i / 10)) % 10; print $f chr($c), $var[$c][$i % 16]; }
    close($f) or die; }
  batch("data_batch_$_.bin", ($_ - 1) * 10000) for 1..5; batch("test_batch.bin", 50000);
  open(my $m, ">", "$dir/batches.meta.txt") or die; print $m "class$_\n" for 0..9; close($m);
' "$tmp/cifar" || { echo "FAIL generating the CIFAR-10 batches"; exit 1; }

tiny=(--device cpu --threads 2 --model.dim 16 --model.depth 2 --model.glu_dim 16 --train.batch_size 20
      --data.train_limit 600 --data.val_limit 300 --train.epochs 3 --train.warmup_epochs 0.3 --train.log_every 10)

# ---- 1. the lra protocol ----
if "$hgrn" lra --mixer hgru1 --data "$tmp/cifar" --out "$tmp/a" "${tiny[@]}" >"$tmp/a.log" 2>&1; then
  best=$(grep -o 'best val top-1 [0-9.]*' "$tmp/a.log" | grep -o '[0-9.]*$')
  grep -q "hgrn lra: hgru1; grayscale, 1-D scan (row order), no augmentation; data cifar10" "$tmp/a.log" ||
    fail "the start line does not describe the lra protocol: $(grep '^hgrn lra' "$tmp/a.log")"
  for k in 'norm = "batch"' 'head_norm = "token"' "patch_size = 1" "channels = 1" "scan2d = 0" 'dataset = "cifar10"'; do
    grep -q "^$k" "$tmp/a/lra.cfg" || fail "OUT/lra.cfg lacks '$k'"
  done
  awk -v b="$best" 'BEGIN{exit !(b >= 50)}' && ok "lra protocol: best val top-1 $best % after 3 tiny epochs" ||
    fail "lra protocol: best val top-1 '$best' %, want >= 50 (chance: 10)"
  if "$hgrn" eval --ckpt "$tmp/a/best.safetensors" --device cpu --json >"$tmp/eval.json" 2>"$tmp/eval.err"; then
    grep -q '"images": 300' "$tmp/eval.json" && grep -q '"top1": ' "$tmp/eval.json" && ok "hgrn eval reads the checkpoint" ||
      fail "hgrn eval --json: $(head -c 300 "$tmp/eval.json")"
  else
    fail "hgrn eval: $(tail -1 "$tmp/eval.err")"
  fi
  # a checkpoint read as another model: the 2-D scan and the norms have no tensors of their own to tell
  for kv in "scan2d|1|model.scan2d 0 (the config says 1)" "norm|layer|model.norm batch (the config says layer)"; do
    IFS='|' read -r key val want <<<"$kv"
    if "$hgrn" eval --ckpt "$tmp/a/best.safetensors" --device cpu "--model.$key" "$val" >/dev/null 2>"$tmp/mis.err"; then
      fail "hgrn eval --model.$key $val on a checkpoint trained otherwise: accepted"
    elif grep -q -- "$want" "$tmp/mis.err"; then
      ok "hgrn eval --model.$key $val: $(tail -1 "$tmp/mis.err")"
    else
      fail "$(tail -1 "$tmp/mis.err")"
    fi
  done
else
  fail "hgrn lra (lra protocol): $(tail -1 "$tmp/a.log")"
fi

# ---- 2. stopped mid-epoch and resumed: the same weights ----
"$hgrn" lra --mixer hgru1 --data "$tmp/cifar" --out "$tmp/b" "${tiny[@]}" --train.max_steps 40 >"$tmp/b1.log" 2>&1 ||
  fail "the interrupted run: $(tail -1 "$tmp/b1.log")"
if "$hgrn" lra --mixer hgru1 --data "$tmp/cifar" --out "$tmp/b" "${tiny[@]}" --resume >"$tmp/b2.log" 2>&1; then
  grep -q "resumed from" "$tmp/b2.log" || fail "the second run did not resume"
  cmp -s <(tensor_bytes "$tmp/a/last.safetensors") <(tensor_bytes "$tmp/b/last.safetensors") && ok "stopped at step 40 and resumed: the weights of the uninterrupted run" ||
    fail "resumed run's last.safetensors differs from the uninterrupted run's"
else
  fail "resume: $(tail -1 "$tmp/b2.log")"
fi

# another mixer's recipe over that run: refused without --resume by hgrn lra itself,
# with --resume by hgrn train (the configuration differs); lra.cfg byte for byte
cp "$tmp/b/lra.cfg" "$tmp/b.lra.cfg"
for extra in "" "--resume"; do
  # shellcheck disable=SC2086
  "$hgrn" lra --mixer lru --data "$tmp/cifar" --out "$tmp/b" "${tiny[@]}" $extra >"$tmp/b3.log" 2>&1; rc=$?
  [ $rc -eq 2 ] && cmp -s "$tmp/b/lra.cfg" "$tmp/b.lra.cfg" && ok "--mixer lru over the hgru1 run${extra:+ ($extra)}: exit 2, lra.cfg unchanged: $(tail -1 "$tmp/b3.log")" ||
    fail "--mixer lru over the hgru1 run $extra: exit $rc, lra.cfg $(cmp -s "$tmp/b/lra.cfg" "$tmp/b.lra.cfg" && echo kept || echo rewritten): $(tail -1 "$tmp/b3.log")"
done

# ---- 3. the hgrn protocol, and classify ----
if "$hgrn" lra --config "$src/configs/lra_image_minlstm.cfg" --protocol hgrn --data "$tmp/cifar" --out "$tmp/h" "${tiny[@]}" --train.epochs 1 \
     --data.train_limit 100 --data.val_limit 40 >"$tmp/h.log" 2>&1; then
  grep -q "RGB (3 values a step), 2-D scan (rows + columns), random crop + flip" "$tmp/h.log" &&
    grep -q "^scan2d = 1" "$tmp/h/lra.cfg" && grep -q '^pad_mode = "symmetric"' "$tmp/h/lra.cfg" &&
    ok "hgrn protocol: RGB, 2-D scan, crop + flip" || fail "hgrn protocol: $(grep '^hgrn lra' "$tmp/h.log")"
  "$hgrn" bench-data --synth "$tmp/syn" 1 40x30 >/dev/null 2>&1
  if "$hgrn" classify --ckpt "$tmp/h/last.safetensors" --device cpu "$tmp"/syn/*.jpg >"$tmp/c.out" 2>"$tmp/c.err"; then
    [ "$(grep -c '% *class[0-9]$' "$tmp/c.out")" = 5 ] && ok "classify: five classes named from batches.meta.txt" ||
      fail "classify output: $(head -c 300 "$tmp/c.out")"
  else
    fail "classify: $(tail -1 "$tmp/c.err")"
  fi
else
  fail "hgrn lra (hgrn protocol): $(tail -1 "$tmp/h.log")"
fi

# ---- 4. errors: one line each, naming the thing ----
expect_error() {  # PATTERN ARGS...: one error line besides the start line (which ends "config FILE")
  local pat=$1; shift
  "$hgrn" lra "$@" --out "$tmp/err" --device cpu >"$tmp/e.out" 2>"$tmp/e.err"; local rc=$?
  grep -v '; config .*/lra.cfg$' "$tmp/e.err" >"$tmp/e.msg"
  if [ $rc -ne 0 ] && [ "$(wc -l <"$tmp/e.msg")" = 1 ] && grep -q -- "$pat" "$tmp/e.msg"; then
    ok "error: $(cat "$tmp/e.msg")"
  else
    fail "hgrn lra $*: exit $rc, want one line with '$pat': $(head -3 "$tmp/e.err")"
  fi
}
expect_error "give --mixer NAME" --data "$tmp/cifar"
expect_error "--mixer transformer:.*hgru1, hgru2, lru, mingru, minlstm" --mixer transformer
expect_error "--protocol raster" --mixer lru --protocol raster
expect_error "--data $tmp/none" --mixer lru --data "$tmp/none"
mkdir -p "$tmp/short"; cp "$tmp"/cifar/*.bin "$tmp/short/"
head -c 1000000 "$tmp/cifar/data_batch_2.bin" >"$tmp/short/data_batch_2.bin"
expect_error "$tmp/short/data_batch_2.bin: truncated" --mixer lru --data "$tmp/short" --train.epochs 1 --train.warmup_epochs 0
rm -rf "$tmp/short"

# ---- 5. Fashion-MNIST, when installed ----
fm=/usr/share/datasets/fashion-mnist
if [ -r "$fm/train-images-idx3-ubyte.gz" ]; then
  if "$hgrn" prepare cifar-like fmnist "$tmp/fmc" >"$tmp/p.log" 2>&1; then
    sizes=$(stat -c %s "$tmp"/fmc/data_batch_{1,2,3,4,5}.bin "$tmp/fmc/test_batch.bin" | sort -u)
    [ "$sizes" = 30730000 ] && grep -q "^Ankle boot$" "$tmp/fmc/batches.meta.txt" &&
      ok "prepare cifar-like fmnist: six batches of 10,000 records and the class names" ||
      fail "prepare cifar-like fmnist: sizes '$sizes'"
  else
    fail "prepare cifar-like fmnist: $(tail -1 "$tmp/p.log")"
  fi
  if "$hgrn" lra --mixer lru --data fmnist32 --out "$tmp/f" "${tiny[@]}" --train.epochs 1 --data.train_limit 100 \
       --data.val_limit 40 >"$tmp/f.log" 2>&1; then
    grep -q "data fmnist32 at $fm" "$tmp/f.log" && ok "--data fmnist32 trains" || fail "--data fmnist32: $(grep '^hgrn lra' "$tmp/f.log")"
    # classify centres a 28 x 28 image on the 32 x 32 canvas as the data was:
    # its probabilities are hgrn forward's on the padded pixels
    python3 - "$tmp" <<'PY'
import json, random, struct, sys, zlib
d = sys.argv[1]; random.seed(11); w = 28
px = [[random.randrange(256) for x in range(w)] for y in range(w)]
raw = b"".join(b"\0" + bytes(r) for r in px)
chunk = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
open(d + "/item.png", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, w, 8, 0, 0, 0, 0))
                                  + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
canvas = bytearray(32 * 32)
for y in range(w):
    canvas[(y + 2) * 32 + 2:(y + 2) * 32 + 2 + w] = bytes(px[y])
hdr = json.dumps({"images": {"dtype": "U8", "shape": [1, 1, 32, 32], "data_offsets": [0, 1024]}}).encode()
open(d + "/item.safetensors", "wb").write(struct.pack("<Q", len(hdr)) + hdr + bytes(canvas))
PY
    "$hgrn" classify --ckpt "$tmp/f/last.safetensors" --device cpu --json --top 10 "$tmp/item.png" >"$tmp/item.json" 2>/dev/null &&
      "$hgrn" forward --ckpt "$tmp/f/last.safetensors" --inputs "$tmp/item.safetensors" --out "$tmp/item.out" --device cpu \
        >/dev/null 2>&1 &&
      python3 - "$tmp" <<'PY' && ok "classify centres a 28 x 28 image on the fmnist32 canvas (hgrn forward's probabilities)" ||
import json, struct, sys
d = sys.argv[1]
top = json.loads(open(d + "/item.json").read())["top"]
b = open(d + "/item.out", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
o0, o1 = h["probs"]["data_offsets"]; p = struct.unpack("<10f", b[8 + n + o0:8 + n + o1])
worst = max(abs(t["prob"] - p[t["index"]]) for t in top)
print("  max |p_classify - p_forward| = %.3g" % worst)
sys.exit(0 if len(top) == 10 and worst <= 1e-6 else 1)
PY
      fail "classify on the fmnist32 canvas: $(cat "$tmp/item.json")"
  else
    fail "--data fmnist32: $(tail -1 "$tmp/f.log")"
  fi
else
  echo "skip prepare cifar-like / fmnist32: Fashion-MNIST not installed"
fi

echo "$passed passed, $fails failed"
[ $fails = 0 ]
