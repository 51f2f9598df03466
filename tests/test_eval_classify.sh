#!/usr/bin/env bash
# hgrn eval and hgrn classify through the real command line, on a small
# ImageFolder tree of generated JPEGs (6 classes, 8 training and 5
# validation images each) and a model trained on it for a few steps:
#   - eval's top-1, top-5, per-class accuracy and confusion matrix equal the
#     counts made here by hand from classify's per-file predictions and the
#     folders the files are in;
#   - classify's text and JSON output, every file answered in order with a
#     bad file in the middle (exit 1), directories and globs, --top, --logits
#     (their softmax is the probabilities);
#   - the data's classes against the checkpoint's: a subset in another order
#     mapped by name, other names a warning (also where the checkpoint's
#     names come from a class-names file: F-MNIST's against folders animal/
#     and thing/; classify of that tree notes it), more classes an error;
#   - --data DIR without --data.dataset: the layout detected and named in
#     one line (ImageFolder root, class folders, flat val/ + labels,
#     CIFAR-10, IDX; hgrn train too), nothing recognised refused (exit 2);
#   - unreadable images: counted and named in the JSON's warnings, one
#     stderr line, exit 1; an unwritable --confusion refused before the
#     evaluation (exit 2); classify DIR/ joins paths with one slash;
#   - on a GPU (skipped without one): classify with nvJPEG and the GPU
#     transform (--data.decode gpu) answers as with the CPU decoder, the
#     same files and errors, probabilities within 1e-3 (the hardware engines
#     decode libjpeg's exact pixels; the GPU-hybrid decoder's IDCT may move a
#     pixel a level), a PNG named .jpg and a truncated JPEG among them;
#   - the checkpoint trained from a relative --data path, evaluated from
#     another directory; the run directory's config.cfg and the checkpoints
#     hold data.path and data.class_names absolute, and training again from
#     that config.cfg works from another directory; a data directory without
#     train/ and val/ refused;
#     another token mixer than the checkpoint's named.
# usage: test_eval_classify.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; n=0
ok() { n=$((n + 1)); echo "ok   $1"; }
fail() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL $1"; }
# near A B: |A - B| <= 1e-9 (percentages printed with full precision)
near() { awk -v a="$1" -v b="$2" 'BEGIN{d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9)}'; }

# --- the data: 6 classes a..f, generated photo-like JPEGs of different sizes
classes="a b c d e f"
"$hgrn" bench-data --synth "$tmp/pool" 78 96x80 >/dev/null || { echo "FAIL synth"; exit 1; }
i=0
for c in $classes; do
  mkdir -p "$tmp/data/train/$c" "$tmp/data/val/$c"
  for k in 1 2 3 4 5 6 7 8; do mv "$tmp/pool/synth_$(printf %05d $i).jpg" "$tmp/data/train/$c/t$k.jpg"; i=$((i + 1)); done
  for k in 1 2 3 4 5; do mv "$tmp/pool/synth_$(printf %05d $i).jpg" "$tmp/data/val/$c/v$k.jpg"; i=$((i + 1)); done
done
cfg=$src/configs/fmnist_hgrn1_tiny.cfg
common=(--device cpu --model.channels 3 --data.mean 0.5,0.5,0.5 --data.std 0.25,0.25,0.25 --model.num_classes 6
        --model.dim 16 --model.depth 2 --model.glu_dim 32 --data.dataset imagefolder --data.class_names ""
        --train.batch_size 8 --train.epochs 2 --train.warmup_epochs 0 --data.crop_pct 0.875)

# --- trained from a relative data path in one directory ...
mkdir -p "$tmp/a" "$tmp/b"
(cd "$tmp/a" && "$hgrn" train --config "$cfg" "${common[@]}" --data ../data --out run >train.log 2>&1) ||
  { echo "FAIL train:"; cat "$tmp/a/train.log"; exit 1; }
ckpt=$tmp/a/run/best.safetensors
[ -f "$ckpt" ] && ok "trained: $(tail -n 1 "$tmp/a/train.log")" || { fail "no best.safetensors"; exit 1; }

# --- ... evaluated from another: the checkpoint stores the data path absolute
(cd "$tmp/b" && "$hgrn" eval --ckpt ../a/run/best.safetensors --device cpu --json --confusion conf.csv \
  >eval.json 2>eval.err) || { fail "eval from another directory:"; cat "$tmp/b/eval.err"; }
data_abs=$(cd "$tmp/data" && pwd -P)
grep -q "\"data\": \"$data_abs\"" "$tmp/b/eval.json" && ok "relative --data stored absolute: $data_abs" ||
  { fail "stored data path:"; cat "$tmp/b/eval.json"; }

# --- the run directory's config.cfg, with a relative class-names file too:
# both paths absolute there and in the checkpoints (whose header holds the
# config as a JSON string: quotes escaped), and the config trains again from
# another directory
printf '%s\n' $classes >"$tmp/a/names.txt"
(cd "$tmp/a" && "$hgrn" train --config "$cfg" "${common[@]}" --data ../data --data.class_names names.txt --out run_names \
  --train.max_steps 2 >train_names.log 2>&1) || { fail "train with relative class names:"; cat "$tmp/a/train_names.log"; }
names_abs=$(cd "$tmp/a" && pwd -P)/names.txt
grep -qxF "path = \"$data_abs\"" "$tmp/a/run_names/config.cfg" &&
  grep -qxF "class_names = \"$names_abs\"" "$tmp/a/run_names/config.cfg" &&
  ok "config.cfg: data.path and data.class_names absolute" || { fail "config.cfg paths:"; grep -E '^(path|class_names) =' "$tmp/a/run_names/config.cfg"; }
for f in best last last.state; do
  grep -qaF "path = \\\"$data_abs\\\"" "$tmp/a/run_names/$f.safetensors" &&
    grep -qaF "class_names = \\\"$names_abs\\\"" "$tmp/a/run_names/$f.safetensors" &&
    ok "$f.safetensors: data.path and data.class_names absolute" || fail "$f.safetensors: stored paths not absolute"
done
(cd "$tmp/b" && "$hgrn" train --config ../a/run_names/config.cfg --device cpu --out again --train.max_steps 1 >again.log 2>&1) &&
  grep -q "done: 1 steps" "$tmp/b/again.log" && ok "trained again from config.cfg in another directory" ||
  { fail "train from config.cfg elsewhere:"; cat "$tmp/b/again.log"; }
(cd "$tmp/b" && "$hgrn" eval --ckpt ../a/run_names/best.safetensors --device cpu >names_eval.out 2>&1) &&
  ok "evaluated the class-names run from another directory" || { fail "eval of the class-names run:"; cat "$tmp/b/names_eval.out"; }

# --- classify every validation image (a directory argument), JSON, all 6
# classes; in batches of 5 where eval's are 8: on the
# CPU an image's probabilities do not depend on its batch (a GEMM call per
# image in evaluation), so the two compute the same bits
"$hgrn" classify --ckpt "$ckpt" --device cpu --json --top 6 --logits --batch 5 "$tmp/data/val" >"$tmp/cls.json" 2>"$tmp/cls.err" ||
  { fail "classify the val directory:"; cat "$tmp/cls.err"; }
[ "$(wc -l <"$tmp/cls.json")" -eq 30 ] && ok "classify DIR: 30 answers" || fail "classify DIR: $(wc -l <"$tmp/cls.json") answers"
# by hand: the file's class from its folder, its top-1 / top-5 from the JSON
awk -v classes="$classes" '
  BEGIN { K = split(classes, name, " "); for (k = 1; k <= K; k++) idx[name[k]] = k - 1 }
  {
    match($0, /"file": "[^"]*"/); f = substr($0, RSTART + 9, RLENGTH - 10)
    m = split(f, parts, "/"); y = idx[parts[m - 1]]
    s = $0; j = 0
    while (match(s, /"index": [0-9]+/)) { top[j++] = substr(s, RSTART + 9, RLENGTH - 9) + 0; s = substr(s, RSTART + RLENGTH) }
    n[y]++; total++
    if (top[0] == y) { c1[y]++; t1++ }
    for (k = 0; k < 5; k++) if (top[k] == y) { c5[y]++; t5++ }
    conf[y, top[0]]++
  }
  END {
    printf "top1 %.17g\ntop5 %.17g\n", 100 * t1 / total, 100 * t5 / total
    for (k = 0; k < K; k++) printf "class %d %d %.17g %.17g\n", k, n[k], 100 * c1[k] / n[k], 100 * c5[k] / n[k]
    for (t = 0; t < K; t++) { row = name[t + 1]; for (p = 0; p < K; p++) row = row "," (conf[t, p] + 0); print "conf " row }
  }' "$tmp/cls.json" >"$tmp/hand.txt"
json=$(cat "$tmp/b/eval.json")
get() { printf '%s' "$json" | grep -o "\"$1\": [-0-9.e+]*" | head -n 1 | awk '{print $2}'; }
want1=$(awk '/^top1/{print $2}' "$tmp/hand.txt"); want5=$(awk '/^top5/{print $2}' "$tmp/hand.txt")
near "$(get top1)" "$want1" && near "$(get top5)" "$want5" && [ "$(get images)" = 30 ] &&
  ok "eval top-1 $(get top1)%, top-5 $(get top5)% = the hand count over 30 images" ||
  { fail "eval vs hand count: eval $(get top1) / $(get top5), by hand $want1 / $want5"; cat "$tmp/hand.txt"; }
bad=0
while read -r _ k cnt a1 a5; do
  entry=$(printf '%s' "$json" | grep -o "{\"index\": $k, \"name\": \"[a-f]\", \"images\": [0-9]*, \"top1\": [-0-9.e+]*, \"top5\": [-0-9.e+]*}")
  e1=$(printf '%s' "$entry" | sed 's/.*"top1": \([^,]*\),.*/\1/'); e5=$(printf '%s' "$entry" | sed 's/.*"top5": \([^}]*\)}/\1/')
  en=$(printf '%s' "$entry" | sed 's/.*"images": \([0-9]*\),.*/\1/')
  { [ "$en" = "$cnt" ] && near "$e1" "$a1" && near "$e5" "$a5"; } || { bad=1; echo "  class $k: eval '$entry', by hand $cnt $a1 $a5"; }
done < <(grep '^class ' "$tmp/hand.txt")
[ $bad -eq 0 ] && ok "per-class top-1 / top-5 = the hand count" || fail "per-class accuracy"
grep '^conf ' "$tmp/hand.txt" | sed 's/^conf //' >"$tmp/conf_hand.csv"
tail -n +2 "$tmp/b/conf.csv" | diff - "$tmp/conf_hand.csv" >/dev/null && [ "$(head -n 1 "$tmp/b/conf.csv")" = 'true\predicted,a,b,c,d,e,f' ] &&
  ok "confusion CSV = the hand count" || { fail "confusion CSV:"; cat "$tmp/b/conf.csv" "$tmp/conf_hand.csv"; }
# the logits' softmax is the probabilities (every class listed with --top 6)
awk '{
    s = $0; sub(/.*"logits": \[/, "", s); sub(/\].*/, "", s); K = split(s, l, ", ")
    mx = l[1]; for (k = 2; k <= K; k++) if (l[k] > mx) mx = l[k]
    z = 0; for (k = 1; k <= K; k++) z += exp(l[k] - mx)
    t = $0; while (match(t, /"index": [0-9]+, "class": "[^"]*", "prob": [-0-9.e+]+/)) {
      u = substr(t, RSTART, RLENGTH); t = substr(t, RSTART + RLENGTH)
      split(u, q, /[:,] */); i = q[2] + 0; p = u; sub(/.*"prob": /, "", p)
      d = p - exp(l[i + 1] - mx) / z; if (d < 0) d = -d; if (d > 1e-6) bad++
    }
  } END { exit bad > 0 }' "$tmp/cls.json" && ok "--logits: softmax(logits) = the probabilities" || fail "--logits vs probabilities"

# --- the text output, a bad file in the middle: every file answered in order, exit 1
good1=$tmp/data/val/a/v1.jpg; good2=$tmp/data/val/b/v2.jpg
printf 'not an image' >"$tmp/bad.jpg"
"$hgrn" classify --ckpt "$ckpt" --device cpu "$good1" "$tmp/bad.jpg" "$good2" --top 2 >"$tmp/text.out" 2>"$tmp/text.err"; rc=$?
expect=$(printf '%s\n' "$good1" x x "$tmp/bad.jpg: error: not a JPEG or PNG image" "$good2" x x)
got=$(sed -E 's/^  +[0-9.e+-]+%  [a-f]$/x/' "$tmp/text.out")
[ $rc -eq 1 ] && [ "$got" = "$expect" ] && grep -q "2 images classified, 1 failed" "$tmp/text.err" &&
  ok "text: good, bad, good answered in order, exit 1" || { fail "text output (exit $rc):"; cat "$tmp/text.out" "$tmp/text.err"; }
"$hgrn" classify --ckpt "$ckpt" --device cpu --json "$good1" "$tmp/bad.jpg" "$tmp/missing.jpg" "$good2" >"$tmp/j.out" 2>/dev/null; rc=$?
lines=$(sed -E 's/"top": \[.*\]/TOP/' "$tmp/j.out")
expect=$(printf '{"file": "%s", TOP}\n{"file": "%s", "error": "not a JPEG or PNG image"}\n{"file": "%s", "error": "No such file or directory"}\n{"file": "%s", TOP}' \
  "$good1" "$tmp/bad.jpg" "$tmp/missing.jpg" "$good2")
[ $rc -eq 1 ] && [ "$lines" = "$expect" ] && ok "JSON: an error object in place of each bad file, exit 1" ||
  { fail "JSON with bad files (exit $rc):"; cat "$tmp/j.out"; }
# the same file gives the same answer in a batch of 8 and alone (the same
# class order; probabilities within 1e-6: the GEMMs may block a batch's rows
# differently from one image's)
one=$("$hgrn" classify --ckpt "$ckpt" --device cpu --json --top 6 "$tmp/data/val/c/v3.jpg" 2>/dev/null)
inbatch=$(grep '"file": "[^"]*/c/v3.jpg"' "$tmp/cls.json")
printf '%s\n%s\n' "$one" "$inbatch" | awk '{
    s = $0; j = 0
    while (match(s, /"index": [0-9]+, "class": "[a-f]", "prob": [-0-9.e+]+/)) {
      u = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH); split(u, q, /[:,] */)
      p = u; sub(/.*"prob": /, "", p); idx[NR, j] = q[2]; prob[NR, j++] = p
    }
    cnt[NR] = j
  } END {
    if (cnt[1] != 6 || cnt[2] != 6) exit 1
    for (j = 0; j < 6; j++) { d = prob[1, j] - prob[2, j]; if (d < 0) d = -d; if (idx[1, j] != idx[2, j] || d > 1e-6) exit 1 }
  }' && ok "a file alone = the same file in a batch of 8" || { fail "batch vs alone:"; echo "$one"; echo "$inbatch"; }
# globs (quoted: hgrn expands them) and a pattern that matches nothing
"$hgrn" classify --ckpt "$ckpt" --device cpu --json "$tmp/data/val/*/v5.jpg" "$tmp/nothing/*.jpg" >"$tmp/g.out" 2>/dev/null
[ "$(grep -c '"top"' "$tmp/g.out")" -eq 6 ] && grep -q '"error": "no file matches this pattern"' "$tmp/g.out" &&
  ok "globs: 6 files matched, an empty pattern answered with its error" || { fail "globs:"; cat "$tmp/g.out"; }

# --- on the GPU: nvJPEG + the GPU transform against the CPU decoder (skipped without a GPU)
gpu_ok=0
if [ "$("$hgrn" device 2>/dev/null)" = cuda ]; then
  "$hgrn" classify --ckpt "$ckpt" --device cuda --data.decode gpu "$good1" >/dev/null 2>"$tmp/gpu_probe.err" && gpu_ok=1
  grep -q "without nvJPEG" "$tmp/gpu_probe.err" && gpu_ok=2   # a CUDA build without nvJPEG: skipped
  [ $gpu_ok -eq 0 ] && fail "classify --device cuda --data.decode gpu: $(tail -n 1 "$tmp/gpu_probe.err")"
fi
if [ $gpu_ok -eq 1 ]; then
  head -c 2000 "$good1" >"$tmp/trunc.jpg"
  python3 -c '
import struct, sys, zlib
w, h = 40, 30
raw = b"".join(b"\0" + bytes((x * 6 + y * k * 3) % 256 for x in range(w) for k in range(3)) for y in range(h))
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
sys.stdout.buffer.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                       + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))' >"$tmp/plain.jpg"
  files=("$tmp/data/val" "$tmp/bad.jpg" "$tmp/trunc.jpg" "$tmp/plain.jpg")
  "$hgrn" classify --ckpt "$ckpt" --device cuda --data.decode cpu --json --top 6 --batch 7 "${files[@]}" >"$tmp/gc.json" 2>/dev/null
  "$hgrn" classify --ckpt "$ckpt" --device cuda --data.decode gpu --json --top 6 --batch 7 "${files[@]}" >"$tmp/gg.json" 2>"$tmp/gg.err"; rc=$?
  grep -q "nvJPEG" "$tmp/gg.err" && [ $rc -eq 1 ] && ok "classify --data.decode gpu: $(tail -n 1 "$tmp/gg.err")" ||
    { fail "classify on the GPU decoder (exit $rc):"; cat "$tmp/gg.err"; }
  awk 'NR == FNR { a[FNR] = $0; next }
       { if (($0 ~ /"error"/) != (a[FNR] ~ /"error"/)) { bad++; next }
         n1 = split(a[FNR], x, /"prob": /); n2 = split($0, y, /"prob": /)
         if (n1 != n2) { bad++; next }
         for (i = 2; i <= n1; i++) { d = x[i] + 0 - (y[i] + 0); if (d < 0) d = -d; if (d > worst) worst = d }
       }
       END { printf "  max |p_gpu - p_cpu| = %.3g over %d answers\n", worst, FNR; exit bad > 0 || worst > 1e-3 || FNR != 33 }' \
    "$tmp/gc.json" "$tmp/gg.json" && ok "GPU decoding answers as the CPU decoder (33 files, errors in place)" ||
    { fail "GPU vs CPU decoding:"; paste -d '\n' "$tmp/gc.json" "$tmp/gg.json" | head -20; }
else
  echo "skip GPU classify: no GPU with nvJPEG (hgrn device: $("$hgrn" device 2>/dev/null))"
fi

# --- the data's classes against the checkpoint's
mkdir -p "$tmp/sub/val"; cp -r "$tmp/data/val/e" "$tmp/sub/val/0e"; cp -r "$tmp/data/val/b" "$tmp/sub/val/1b"
mv "$tmp/sub/val/0e" "$tmp/sub/val/e"; mv "$tmp/sub/val/1b" "$tmp/sub/val/b"
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/sub" --json >"$tmp/sub.json" 2>"$tmp/sub.err"
# by hand over classes b and e only, with the checkpoint's indices (b = 1, e = 4)
want=$(grep -E '"file": "[^"]*/(b|e)/' "$tmp/cls.json" | awk '{ y = ($0 ~ /\/b\//) ? 1 : 4; match($0, /"index": [0-9]+/); t += substr($0, RSTART + 9, RLENGTH - 9) + 0 == y; n++ } END { printf "%.17g", 100 * t / n }')
json=$(cat "$tmp/sub.json")
grep -q "mapped by name" "$tmp/sub.err" && near "$(get top1)" "$want" &&
  ok "a subset of the classes: mapped by name, top-1 $(get top1)% = the hand count" || { fail "subset:"; cat "$tmp/sub.err" "$tmp/sub.json"; }
mkdir -p "$tmp/other/val"; cp -r "$tmp/data/val/a" "$tmp/other/val/x"; cp -r "$tmp/data/val/b" "$tmp/other/val/y"
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/other" >/dev/null 2>"$tmp/other.err" &&
  grep -q "warning: 2 of the data's 2 class names differ from the checkpoint's (class 0: data 'x', checkpoint 'a')" "$tmp/other.err" &&
  ok "other class names: $(grep warning "$tmp/other.err")" || { fail "other names:"; cat "$tmp/other.err"; }
mkdir -p "$tmp/more/val"; for c in a b c d e f g; do cp -r "$tmp/data/val/a" "$tmp/more/val/$c"; done
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/more" >/dev/null 2>"$tmp/more.err" && fail "7 classes accepted" ||
  { grep -q "the data has 7 classes but the checkpoint's model has 6" "$tmp/more.err" && ok "more classes: $(cat "$tmp/more.err")" || { fail "more classes:"; cat "$tmp/more.err"; }; }

# --- a data directory without train/ and val/, another mixer
mkdir -p "$tmp/flat/x"; cp "$good1" "$tmp/flat/x/"
"$hgrn" train --config "$cfg" "${common[@]}" --data "$tmp/flat" --out "$tmp/r2" >/dev/null 2>"$tmp/flat.err" && fail "flat dir trained" ||
  { grep -q "has no train/ directory" "$tmp/flat.err" && ok "train on a directory without train/: $(cat "$tmp/flat.err")" || { fail "flat:"; cat "$tmp/flat.err"; }; }
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/data/val" >"$tmp/valdir.out" 2>&1 && grep -q "30 images" "$tmp/valdir.out" &&
  ok "eval --data the val/ directory itself" || { fail "eval on val/ itself:"; cat "$tmp/valdir.out"; }
"$hgrn" eval --ckpt "$ckpt" --device cpu --model.mixer hgru2 >/dev/null 2>"$tmp/mix.err" && fail "mixer mismatch accepted" ||
  { grep -q "holds a model with token mixer hgru1 (model.mixer = hgru1), but the config asks for hgru2" "$tmp/mix.err" &&
    ok "another mixer: $(cat "$tmp/mix.err")" || { fail "mixer:"; cat "$tmp/mix.err"; }; }

# --- --data DIR without --data.dataset: the layout is detected and named in one line
# (an ImageFolder root, class folders, a flat val/ with val_labels.txt, CIFAR-10
# batches, IDX files); a directory of none of them, a missing one and a flat one
# without labels are refused before any work (exit 2)
line() { grep -m1 "^hgrn $1: --data " "$2"; }
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/data" >/dev/null 2>"$tmp/d1.err" &&
  line eval "$tmp/d1.err" | grep -q "an ImageFolder root: train/ with 6 class folders, val/ with 6 class folders; data.dataset imagefolder$" &&
  ok "detected: $(line eval "$tmp/d1.err")" || { fail "ImageFolder root:"; cat "$tmp/d1.err"; }
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/data/val" >/dev/null 2>"$tmp/d2.err" &&
  line eval "$tmp/d2.err" | grep -q "6 class folders (one split" && ok "detected: $(line eval "$tmp/d2.err")" ||
  { fail "class folders:"; cat "$tmp/d2.err"; }
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/data" --data.dataset imagefolder >/dev/null 2>"$tmp/d3.err" &&
  ! line eval "$tmp/d3.err" >/dev/null && ok "--data.dataset given: nothing detected" || { fail "explicit dataset:"; cat "$tmp/d3.err"; }
mkdir -p "$tmp/flatv/val"; k=0
for c in $classes; do
  for f in "$tmp/data/val/$c"/*.jpg; do cp "$f" "$tmp/flatv/val/${c}_$(basename "$f")"; echo "${c}_$(basename "$f") $k"; done
  k=$((k + 1))
done >"$tmp/flatv/val_labels.txt"
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/flatv" --json >"$tmp/flat.json" 2>"$tmp/d4.err"; rc=$?
json=$(cat "$tmp/flat.json"); t_flat=$(get top1); json=$(cat "$tmp/b/eval.json"); t_tree=$(get top1)
# the same 30 images and labels in other batches: top-1 within one image of the tree's
[ $rc -eq 0 ] && line eval "$tmp/d4.err" | grep -q "val/ holding 30 images without class folders (ImageNet's flat validation directory; labels $tmp/flatv/val_labels.txt)" &&
  grep -q '"images": 30,' "$tmp/flat.json" && awk -v a="$t_flat" -v b="$t_tree" 'BEGIN{d = a - b; if (d < 0) d = -d; exit !(d <= 100 / 30 + 1e-9)}' &&
  ok "flat val/ + val_labels.txt: 30 images, top-1 $t_flat% (the class folders: $t_tree%)" || { fail "flat val (exit $rc, $t_flat vs $t_tree):"; cat "$tmp/d4.err"; }
mkdir -p "$tmp/cifar"; : >"$tmp/cifar/data_batch_1.bin"; : >"$tmp/cifar/test_batch.bin"
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/cifar" >/dev/null 2>"$tmp/d5.err"
line eval "$tmp/d5.err" | grep -q "CIFAR-10 binary batches (1 data_batch_N.bin, and test_batch.bin); data.dataset cifar10 (the config said imagefolder)" &&
  ok "detected: $(line eval "$tmp/d5.err")" || { fail "CIFAR-10:"; cat "$tmp/d5.err"; }
mkdir -p "$tmp/idx"; : >"$tmp/idx/t10k-images-idx3-ubyte.gz"
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/idx" >/dev/null 2>"$tmp/d6.err"
line eval "$tmp/d6.err" | grep -q "Fashion-MNIST IDX files (t10k); data.dataset fmnist (the config said imagefolder)" &&
  ok "detected: $(line eval "$tmp/d6.err")" || { fail "IDX:"; cat "$tmp/d6.err"; }
mkdir -p "$tmp/nothing_here" "$tmp/flat_nolabels/val"; cp "$good1" "$tmp/flat_nolabels/val/"
for kv in "nothing_here|no dataset found: neither CIFAR-10 batches" "no_such_dir|: no such directory" \
          "flat_nolabels|without class folders .*: pass --data.val_labels FILE"; do
  IFS='|' read -r d want <<<"$kv"
  "$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/$d" >"$tmp/d7.out" 2>"$tmp/d7.err"; rc=$?
  [ $rc -eq 2 ] && [ ! -s "$tmp/d7.out" ] && grep -qE "^hgrn eval: --data $tmp/$d.*$want" "$tmp/d7.err" &&
    ok "refused (exit 2): $(cat "$tmp/d7.err")" || { fail "--data $d (exit $rc):"; cat "$tmp/d7.err"; }
done
# hgrn train: a config of another dataset switches to what --data holds, and says so
nods=(); skip=0
for a in "${common[@]}"; do
  if [ $skip = 1 ]; then skip=0; elif [ "$a" = --data.dataset ]; then skip=1; else nods+=("$a"); fi
done
"$hgrn" train --config "$cfg" "${nods[@]}" --data "$tmp/data" --out "$tmp/r3" \
  --train.max_steps 1 >/dev/null 2>"$tmp/d8.err"
line train "$tmp/d8.err" | grep -q "an ImageFolder root: train/ with 6 class folders, val/ with 6 class folders; data.dataset imagefolder (the config said fmnist)" &&
  [ -f "$tmp/r3/last.safetensors" ] && ok "train detected: $(line train "$tmp/d8.err")" || { fail "train --data detection:"; cat "$tmp/d8.err"; }

# --- unreadable images in the evaluation: counted, named in the JSON's warnings and one
# stderr line, exit 1 (the figures leave them out)
cp -r "$tmp/data" "$tmp/withbad"
for k in 1 2 3 4; do printf 'not an image %d' $k >"$tmp/withbad/val/c/zbad$k.jpg"; done
"$hgrn" eval --ckpt "$ckpt" --device cpu --data "$tmp/withbad" --json >"$tmp/wb.json" 2>"$tmp/wb.err"; rc=$?
[ $rc -eq 1 ] && grep -q '"warnings": \["4 of 34 images could not be read and are left out of the figures: [^"]*zbad1.jpg, [^"]*zbad4.jpg"\]' "$tmp/wb.json" &&
  grep -q '"images": 30,' "$tmp/wb.json" && [ "$(grep -c '^hgrn eval: warning: 4 of 34 images could not be read' "$tmp/wb.err")" -eq 1 ] &&
  ok "4 of 34 unreadable: in warnings, one stderr line, exit 1" || { fail "unreadable (exit $rc):"; cat "$tmp/wb.json" "$tmp/wb.err"; }
# an output path that cannot be written is refused before the evaluation
"$hgrn" eval --ckpt "$ckpt" --device cpu --confusion "$tmp/no_dir/c.csv" >"$tmp/cf.out" 2>"$tmp/cf.err"; rc=$?
[ $rc -eq 2 ] && [ ! -s "$tmp/cf.out" ] && ! grep -q "top-1" "$tmp/cf.err" && grep -q "^hgrn eval: --confusion $tmp/no_dir/c.csv: $tmp/no_dir: no such directory$" "$tmp/cf.err" &&
  ok "unwritable --confusion refused first: $(cat "$tmp/cf.err")" || { fail "--confusion (exit $rc):"; cat "$tmp/cf.out" "$tmp/cf.err"; }
# a directory argument with a trailing slash: paths joined with one slash
"$hgrn" classify --ckpt "$ckpt" --device cpu --top 1 "$tmp/data/val/a/" >"$tmp/slash.out" 2>/dev/null
grep -qx "$tmp/data/val/a/v1.jpg" "$tmp/slash.out" && ! grep -q '//' "$tmp/slash.out" && ok "classify DIR/: $tmp/data/val/a/v1.jpg" ||
  { fail "classify DIR/:"; head -3 "$tmp/slash.out"; }

# --- a checkpoint whose class names come from a file: compared with the folder names
# too. F-MNIST's names (a model trained on the IDX files) against folders animal/
# and thing/: a warning, never a silent mapping; classify of that tree notes it
if [ -r /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  "$hgrn" train --config "$cfg" --device cpu --out "$tmp/fm" --model.dim 8 --model.depth 1 --model.glu_dim 8 \
    --train.max_steps 1 --data.train_limit 256 --data.val_limit 64 >/dev/null 2>&1 || fail "F-MNIST tiny train"
  "$hgrn" eval --ckpt "$tmp/fm/last.safetensors" --device cpu --data /usr/share/datasets/fashion-mnist --data.val_limit 64 \
    >"$tmp/fmidx.out" 2>"$tmp/fmidx.err" && grep -q "64 images, 10 classes" "$tmp/fmidx.out" &&
    line eval "$tmp/fmidx.err" | grep -q "Fashion-MNIST IDX files (train and t10k); data.dataset fmnist$" &&
    ok "IDX directory evaluated: $(line eval "$tmp/fmidx.err")" || { fail "eval --data on the IDX files:"; cat "$tmp/fmidx.err"; }
  mkdir -p "$tmp/at/val/animal" "$tmp/at/val/thing"
  cp "$tmp"/data/val/a/*.jpg "$tmp/at/val/animal/"; cp "$tmp"/data/val/b/*.jpg "$tmp/at/val/thing/"
  "$hgrn" eval --ckpt "$tmp/fm/last.safetensors" --device cpu --data "$tmp/at" --json >"$tmp/at.json" 2>"$tmp/at.err"; rc=$?
  w="2 of the data's 2 class names differ from the checkpoint's (class 0: data 'animal', checkpoint 'T-shirt/top'); labels are taken as the checkpoint's class indices"
  [ $rc -eq 0 ] && grep -qF "hgrn eval: warning: $w" "$tmp/at.err" && grep -qF "\"warnings\": [\"$w\"]" "$tmp/at.json" &&
    line eval "$tmp/at.err" | grep -q "data.dataset imagefolder (the config said fmnist)" &&
    ok "F-MNIST checkpoint on animal/, thing/: IDX data not looked for; $(grep warning "$tmp/at.err")" || { fail "F-MNIST names vs folders (exit $rc):"; cat "$tmp/at.err"; }
  "$hgrn" classify --ckpt "$tmp/fm/last.safetensors" --device cpu --top 1 "$tmp/at" >/dev/null 2>"$tmp/atc.err"
  grep -q "^hgrn classify: note: 2 of the 2 class folders of $tmp/at/val are not classes of the checkpoint (folder 'animal'; its classes: 'T-shirt/top', ...)" "$tmp/atc.err" &&
    ok "classify the tree: $(head -n 1 "$tmp/atc.err")" || { fail "classify tree note:"; cat "$tmp/atc.err"; }
else
  echo "skip the F-MNIST checkpoint cases: Fashion-MNIST not installed"
fi
# an ImageFolder model whose class names come from a file (readable names of the
# folders, as ImageNet's): the folders are the training tree's, so a note, no warning
printf '%s\n' alpha bravo charlie delta echo foxtrot >"$tmp/readable.txt"
"$hgrn" train --config "$cfg" "${common[@]}" --data "$tmp/data" --data.class_names "$tmp/readable.txt" --out "$tmp/rn" \
  --train.max_steps 1 >/dev/null 2>&1 || fail "train with readable names"
"$hgrn" eval --ckpt "$tmp/rn/last.safetensors" --device cpu >/dev/null 2>"$tmp/rn.err"; rc=$?
[ $rc -eq 0 ] && grep -q "^hgrn eval: note: the data's folder names are not the checkpoint's class names, which come from data.class_names (class 0: folder 'a', name 'alpha')" "$tmp/rn.err" &&
  ! grep -q warning "$tmp/rn.err" && ok "readable class names of the training folders: $(cat "$tmp/rn.err")" || { fail "readable names (exit $rc):"; cat "$tmp/rn.err"; }

# --- eval's text output: the figures, the throughput and the wall time
"$hgrn" eval --ckpt "$ckpt" --device cpu --per-class >"$tmp/text_eval.out" 2>&1
grep -q "30 images, 6 classes: top-1 " "$tmp/text_eval.out" && grep -q "img/s, batch 8, cpu, 1 rank); .* s in all, of which set-up" "$tmp/text_eval.out" &&
  [ "$(grep -cE '^ +[0-5]  [a-f] ' "$tmp/text_eval.out")" -eq 6 ] && ok "eval text with --per-class" || { fail "eval text:"; cat "$tmp/text_eval.out"; }

echo "$((n - fails)) passed, $fails failed"
[ $fails -eq 0 ]
