#!/usr/bin/env bash
# test_shards_cli.sh - `hgrn prepare shards` / `hgrn prepare index` through the
# command line:
#   - bad flags and paths refused with exit 2 and one line;
#   - a prepare killed after its second shard, after its last one (before
#     the index) and inside a shard resumes: the finished shards are not rewritten (same inode and
#     mtime) and the result is byte for byte the uninterrupted prepare's;
#     another --quality on resume is refused;
#   - ImageNet's flat validation folder + labels file becomes the val split;
#   - Python's tarfile reads hgrn's shards as KEY.jpg + KEY.cls pairs whose
#     data is where the index says (offset, length, CRC-32, label);
#   - tars written by Python's tarfile (PAX and GNU formats, .jpg/.jpeg/.png
#     + .cls, an extra .json, a key without .cls) are indexed by `hgrn
#     prepare index` and train from --data without a bad record;
#   - `hgrn bench-data --loader` measures the shards;
#   - `hgrn train` reads the shards in random and stream mode; evaluation
#     over the shards at 1, 2 and 3 MPI ranks (when mpirun exists) reports
#     exactly what one process reports over the ImageFolder.
# usage: test_shards_cli.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
tmp=$(mktemp -d); trap '[ -n "${HGRN_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fails=0; n=0
ok() { n=$((n + 1)); echo "ok   $1"; }
fail() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL $1"; }
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }

# --- the data: 4 classes of synthetic photo-like JPEGs, train 12 and val 5 each
"$hgrn" bench-data --synth "$tmp/pool" 68 72x60 >/dev/null || { echo "FAIL synth"; exit 1; }
i=0
for c in a b c d; do
  mkdir -p "$tmp/data/train/$c" "$tmp/data/val/$c"
  for k in $(seq 12); do mv "$tmp/pool/synth_$(printf %05d $i).jpg" "$tmp/data/train/$c/t$k.jpg"; i=$((i + 1)); done
  for k in $(seq 5); do mv "$tmp/pool/synth_$(printf %05d $i).jpg" "$tmp/data/val/$c/v$k.jpg"; i=$((i + 1)); done
done
prep=("$hgrn" prepare shards "$tmp/data")
opts=(--shard-mb 0.05 --threads 2 --quality 85)

# --- refused before any work
refused() {   # refused NAME ARGS...: exit 2 and one line on stderr
  local name=$1; shift
  "$hgrn" prepare "$@" >"$tmp/r.out" 2>"$tmp/r.err"; local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/r.err")" -eq 1 ]; then ok "refused: $name ($(cat "$tmp/r.err"))"
  else fail "refused: $name: rc $rc"; cat "$tmp/r.err"; fi
}
refused "quality 0" shards "$tmp/data" "$tmp/x" --quality 0
refused "max-side -1" shards "$tmp/data" "$tmp/x" --max-side -1
refused "unknown option" shards "$tmp/data" "$tmp/x" --frobnicate 1
refused "missing source" shards "$tmp/nowhere" "$tmp/x"
refused "no train/ or val/" shards "$tmp/data/train/a" "$tmp/x"
refused "index of a missing directory" index "$tmp/nowhere"

# --- the reference: one uninterrupted prepare
if "${prep[@]}" "$tmp/ref" "${opts[@]}" >"$tmp/ref.log" 2>&1 && [ -f "$tmp/ref/train.index" ] &&
   [ -f "$tmp/ref/val.index" ] && [ "$(ls "$tmp/ref"/train-*.tar | wc -l)" -ge 3 ]; then
  ok "prepare: $(ls "$tmp/ref"/*.tar | wc -l) shards"
else fail "prepare"; cat "$tmp/ref.log"; fi
same_as_ref() {   # same_as_ref DIR: every file of ref/ identical in DIR, nothing else left
  diff -r "$tmp/ref" "$1" >/dev/null && [ "$(ls -A "$1" | wc -l)" -eq "$(ls -A "$tmp/ref" | wc -l)" ]
}

# --- killed after shard 1 was finished, then resumed
(HGRN_FAULT=prepare_shard_done@1 "${prep[@]}" "$tmp/res" "${opts[@]}") >"$tmp/k1.log" 2>&1; rc=$?
before=$(stat -c '%i %Y.%y' "$tmp/res/train-000000.tar" "$tmp/res/train-000001.tar" 2>/dev/null)
if [ $rc -ne 0 ] && [ ! -f "$tmp/res/train.index" ] && [ -f "$tmp/res/train-000001.tar" ] &&
   [ ! -f "$tmp/res/train-000002.tar" ]; then ok "killed after shard 1 (rc $rc)"
else fail "the fault did not stop the prepare after shard 1 (rc $rc)"; fi
"${prep[@]}" "$tmp/res" "${opts[@]}" --quality 70 >"$tmp/q.log" 2>&1; rc=$?
if [ $rc -eq 2 ] && grep -q "other options" "$tmp/q.log"; then ok "resume with another --quality refused"
else fail "resume with another --quality: rc $rc"; cat "$tmp/q.log"; fi
"${prep[@]}" "$tmp/res" "${opts[@]}" >"$tmp/r1.log" 2>&1; rc=$?
after=$(stat -c '%i %Y.%y' "$tmp/res/train-000000.tar" "$tmp/res/train-000001.tar")
if [ $rc -eq 0 ] && grep -q "(2 kept from an earlier run)" "$tmp/r1.log" && [ "$before" = "$after" ] &&
   same_as_ref "$tmp/res"; then ok "resumed: 2 shards kept untouched, the output is the uninterrupted one's"
else fail "resume after shard 1 (rc $rc)"; cat "$tmp/r1.log"; diff -r "$tmp/ref" "$tmp/res" | head -5; fi

# --- killed after the last training shard was finished, before the index
(HGRN_FAULT=prepare_shard_done@2 "${prep[@]}" "$tmp/last" "${opts[@]}") >"$tmp/k3.log" 2>&1; rc=$?
before=$(stat -c '%i %Y.%y' "$tmp/last"/train-00000[012].tar 2>/dev/null)
if [ $rc -ne 0 ] && [ ! -f "$tmp/last/train.index" ] && [ -f "$tmp/last/train-000002.tar" ] &&
   "${prep[@]}" "$tmp/last" "${opts[@]}" >"$tmp/r3.log" 2>&1 && grep -q "(3 kept from an earlier run)" "$tmp/r3.log" &&
   [ "$before" = "$(stat -c '%i %Y.%y' "$tmp/last"/train-00000[012].tar)" ] && same_as_ref "$tmp/last"; then
  ok "killed after the last shard: resumed with every shard kept, the output is the uninterrupted one's"
else fail "killed after the last shard (rc $rc)"; cat "$tmp/r3.log" 2>/dev/null; fi

# --- killed in the middle of a shard (record 20 written, its shard unfinished)
(HGRN_FAULT=prepare_record@20 "${prep[@]}" "$tmp/mid" "${opts[@]}") >"$tmp/k2.log" 2>&1; rc=$?
if [ $rc -ne 0 ] && ls "$tmp/mid"/*.part >/dev/null 2>&1; then ok "killed inside a shard (a .part left)"
else fail "the fault did not stop the prepare inside a shard (rc $rc)"; fi
if "${prep[@]}" "$tmp/mid" "${opts[@]}" >"$tmp/r2.log" 2>&1 && same_as_ref "$tmp/mid"; then
  ok "resumed from inside a shard: the output is the uninterrupted one's"
else fail "resume from inside a shard"; cat "$tmp/r2.log"; diff -r "$tmp/ref" "$tmp/mid" | head -5; fi
if "${prep[@]}" "$tmp/mid" "${opts[@]}" 2>&1 | grep -q "the split is prepared"; then ok "a finished prepare run again does nothing"
else fail "a finished prepare run again"; fi

# --- Python's tarfile reads hgrn's shards; the index points at the data
cat >"$tmp/check.py" <<'EOF'
import sys, tarfile, zlib
d, split, pairs = sys.argv[1], sys.argv[2], len(sys.argv) < 4
lines = open(f"{d}/{split}.index").read().split("\n")
assert lines[0] == "hgrn-shards\t1", lines[0]
shards = [l.split("\t") for l in lines if l.startswith("shard\t")]
recs = [l.split("\t") for l in lines if l.startswith("rec\t")]
members = {}
for k, (_, name, size) in enumerate(shards):
    with tarfile.open(f"{d}/{name}") as t:
        names = t.getnames()
        # WebDataset: consecutive KEY.jpg, KEY.cls
        assert not pairs or all(a.rsplit(".", 1)[0] == b.rsplit(".", 1)[0] for a, b in zip(names[::2], names[1::2])), names[:4]
        for m in t.getmembers():
            members[(k, m.name)] = (m.offset_data, m.size, t.extractfile(m).read())
    assert int(size) == len(open(f"{d}/{name}", "rb").read())
for _, sh, off, ln, label, w, h, crc, key, srcp in recs:
    ext = next(e for e in ("jpg", "jpeg", "png", "JPEG") if (int(sh), f"{key}.{e}") in members)
    o, s, data = members[(int(sh), f"{key}.{ext}")]
    assert (o, s) == (int(off), int(ln)), (key, o, s, off, ln)
    assert "%08x" % zlib.crc32(data) == crc, key
    assert members[(int(sh), f"{key}.cls")][2].decode().strip() == label, key
print(len(recs), "records checked in", len(shards), "shards")
EOF
for split in train val; do
  if out=$(python3 "$tmp/check.py" "$tmp/ref" $split 2>&1); then ok "Python tarfile reads the $split shards: $out"
  else fail "Python tarfile on the $split shards"; echo "$out"; fi
done

# --- ImageNet's flat validation folder + labels file, beside a prepared train split
mkdir -p "$tmp/flat"; : >"$tmp/flat_labels.txt"; k=0
for c in a b c d; do
  for f in "$tmp/data/val/$c"/*.jpg; do
    cp "$f" "$tmp/flat/${c}_$(basename "$f")"; echo "${c}_$(basename "$f") $k" >>"$tmp/flat_labels.txt"
  done; k=$((k + 1))
done
mkdir -p "$tmp/fl"; cp "$tmp/ref/classes.txt" "$tmp/ref"/train* "$tmp/fl/"
if "$hgrn" prepare shards "$tmp/flat" "$tmp/fl" --val-labels "$tmp/flat_labels.txt" --quiet >"$tmp/fl.log" 2>&1 &&
   out=$(python3 "$tmp/check.py" "$tmp/fl" val 2>&1) &&
   [ "$(awk -F'\t' '$1 == "rec" {split($10, p, "/"); n = p[length(p)]; if (substr(n, 1, 1) != substr("abcd", $5 + 1, 1)) bad++} END {print bad + 0}' "$tmp/fl/val.index")" = 0 ]; then
  ok "the flat validation folder with a labels file: $out, labels as the file says"
else fail "the flat validation folder"; cat "$tmp/fl.log"; echo "$out"; fi

# --- a WebDataset written by Python's tarfile, indexed by hgrn
cat >"$tmp/foreign.py" <<'EOF'
import io, os, struct, sys, tarfile, zlib
data, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
def png(w, h):
    raw = b"".join(b"\0" + bytes((x * 7 + y * 3 + c * 50) % 256 for x in range(w) for c in range(3)) for y in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
def add(t, name, b):
    ti = tarfile.TarInfo(name); ti.size = len(b); t.addfile(ti, io.BytesIO(b))
classes = sorted(os.listdir(f"{data}/train"))
files = [(c, f"{data}/train/{c}/{f}") for c in classes for f in sorted(os.listdir(f"{data}/train/{c}"))]
half = len(files) // 2
for k, (fmt, part) in enumerate([(tarfile.PAX_FORMAT, files[:half]), (tarfile.GNU_FORMAT, files[half:])]):
    with tarfile.open(f"{out}/train-{k:05d}.tar", "w", format=fmt) as t:
        for j, (c, p) in enumerate(part):
            key = f"shard{k}/sample{j:04d}"
            ext = "jpeg" if j % 3 == 1 else "jpg"
            add(t, f"{key}.{ext}", open(p, "rb").read())
            add(t, f"{key}.cls", str(classes.index(c)).encode())
            add(t, f"{key}.json", b'{"source": "python"}')
        add(t, f"shard{k}/extra.png", png(40, 30)); add(t, f"shard{k}/extra.cls", b"2\n")
        add(t, f"shard{k}/nolabel.jpg", open(part[0][1], "rb").read())
with tarfile.open(f"{out}/val-00000.tar", "w") as t:
    for j, c in enumerate(classes):
        for f in sorted(os.listdir(f"{data}/val/{c}")):
            add(t, f"v{j}_{f[:-4]}.jpg", open(f"{data}/val/{c}/{f}", "rb").read())
            add(t, f"v{j}_{f[:-4]}.cls", str(j).encode())
print(len(files) + 2, "samples written")
EOF
if python3 "$tmp/foreign.py" "$tmp/data" "$tmp/wds" >/dev/null && "$hgrn" prepare index "$tmp/wds" >"$tmp/ix.log" 2>&1 &&
   grep -q "2 split(s), 3 shards, 70 records indexed, 2 left out" "$tmp/ix.log" &&
   [ "$(grep -c 'no .cls member' "$tmp/wds/train.skipped")" -eq 2 ]; then ok "prepare index: $(cat "$tmp/ix.log")"
else fail "prepare index"; cat "$tmp/ix.log"; fi
if out=$(python3 "$tmp/check.py" "$tmp/wds" train foreign 2>&1); then ok "the foreign index points at tarfile's data: $out"
else fail "the foreign index against tarfile"; echo "$out"; fi

# --- training and evaluation from the shards
cfg=$src/configs/fmnist_hgrn1_tiny.cfg
common=(--device cpu --threads 1 --model.channels 3 --data.mean 0.5,0.5,0.5 --data.std 0.25,0.25,0.25
        --model.num_classes 4 --model.dim 16 --model.depth 2 --model.glu_dim 32 --data.dataset imagefolder
        --data.class_names "" --train.batch_size 8 --train.epochs 1 --train.warmup_epochs 0 --model.image_size 32
        --data.repeated_aug 1)
for mode in random stream; do
  if "$hgrn" train --config "$cfg" "${common[@]}" --data "$tmp/ref" --data.shard_read $mode --out "$tmp/run_$mode" \
       >"$tmp/train_$mode.log" 2>&1 && ! grep -q "skipping unreadable" "$tmp/train_$mode.log"; then
    ok "train from the shards, $mode mode"
  else fail "train from the shards, $mode mode"; tail -5 "$tmp/train_$mode.log"; fi
done
if "$hgrn" train --config "$cfg" "${common[@]}" --data "$tmp/wds" --model.num_classes 4 --train.max_steps 2 \
     --out "$tmp/run_wds" >"$tmp/train_wds.log" 2>&1 && ! grep -q "skipping unreadable" "$tmp/train_wds.log"; then
  ok "train from the foreign WebDataset"
else fail "train from the foreign WebDataset"; tail -5 "$tmp/train_wds.log"; fi

# bench-data through the loader over the shards; its transform-only mode refuses them
if "$hgrn" bench-data "$tmp/ref" --loader --only train --images 32 --batch 8 --threads 1 >"$tmp/bd.log" 2>&1 &&
   grep -q "48 records of tar shards" "$tmp/bd.log" && grep -q "cpu train loader: .* img/s" "$tmp/bd.log"; then
  ok "bench-data --loader over the shards"
else fail "bench-data --loader over the shards"; tail -3 "$tmp/bd.log"; fi
"$hgrn" bench-data "$tmp/ref" --threads 1 >"$tmp/bd2.log" 2>&1; rc=$?
if [ $rc -eq 2 ] && grep -q "holds tar shards" "$tmp/bd2.log"; then ok "bench-data without --loader names the shards"
else fail "bench-data without --loader on shards: rc $rc"; fi

# evaluation (batches of 6: a multiple of 1, 2 and 3 ranks): the JSON line
# without the keys that may differ (the data path, time, ranks)
evaljson() { grep '^{' "$1" | tail -1 | sed -E 's/"(data|ranks|eval_seconds|img_per_s|setup_seconds|wall_seconds)": [^,}]*//g'; }
ck=$tmp/run_random/last.safetensors
"$hgrn" eval --ckpt "$ck" --device cpu --threads 1 --train.batch_size 6 --data "$tmp/data" --json >"$tmp/e_if.log" 2>&1
ref_json=$(evaljson "$tmp/e_if.log")
"$hgrn" eval --ckpt "$ck" --device cpu --threads 1 --train.batch_size 6 --data "$tmp/ref" --json >"$tmp/e_1.log" 2>&1
if [ -n "$ref_json" ] && echo "$ref_json" | grep -q '"images": 20,' && [ "$(evaljson "$tmp/e_1.log")" = "$ref_json" ]; then
  ok "eval over the shards = eval over the ImageFolder (20 images)"
else fail "eval over the shards"; echo "$ref_json"; evaljson "$tmp/e_1.log"; tail -3 "$tmp/e_1.log"; fi
if command -v mpirun >/dev/null && "$hgrn" --help 2>&1 | grep -q . ; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated \
         OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
  for np in 2 3; do
    timeout 300 mpirun -np $np "$hgrn" eval --ckpt "$ck" --device cpu --threads 1 --train.batch_size 6 --data "$tmp/ref" --json \
      >"$tmp/e_$np.log" 2>&1
    if grep -q "in a build without MPI\|not built with MPI" "$tmp/e_$np.log"; then echo "skip: MPI ranks (no MPI build)"; break; fi
    if [ "$(evaljson "$tmp/e_$np.log")" = "$ref_json" ]; then ok "sharded eval over the shards at $np ranks = one process"
    else fail "sharded eval at $np ranks"; evaljson "$tmp/e_$np.log"; tail -3 "$tmp/e_$np.log"; fi
  done
else
  echo "skip: mpirun not found (sharded evaluation over MPI not checked)"
fi

echo "$((n - fails))/$n passed"
[ $fails -eq 0 ]
