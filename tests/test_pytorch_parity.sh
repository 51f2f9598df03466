#!/usr/bin/env bash
# hgrn against the PyTorch implementation (scripts/pytorch/parity.py): every
# registered token mixer at tiny size, bidirectional and (LRU, minGRU,
# minLSTM) causal, probabilities within 1e-4 and every parameter gradient
# within 1e-3 of PyTorch's (fp32), the weight conversion both ways bit for
# bit, and a wrong reference caught for each (--self-test). Then convert.py's
# errors: an HGRN2 state dict without --head-size (also an export without
# its recorded head size, and a --head-size that contradicts the record), a
# tensor holding a NaN or an infinity (named), a missing tensor, a wrong
# shape, a bidirectional-only mixer imported as causal; and an HGRN2 export
# imported again without --head-size keeps its head size. Needs a python3 with
# torch (Debian: python3-torch, which scripts/deps.sh installs); exits 77
# (skipped) without one.
# usage: test_pytorch_parity.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
py=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "no python3 with torch (apt-get install python3-torch): skipped"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
"$py" "$src/scripts/pytorch/parity.py" --hgrn "$hgrn" --self-test --keep "$tmp/parity" || fails=$((fails + 1))

# convert.py's errors name what is wrong
expect_error() {  # NAME PATTERN -- COMMAND...
  local name=$1 pat=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -eq 0 ] || ! grep -qE -- "$pat" "$tmp/err"; then
    echo "FAIL $name (exit $rc):"; cat "$tmp/err"; fails=$((fails + 1)); return
  fi
  echo "ok   $name: $(head -n 1 "$tmp/err")"
}
conv="$src/scripts/pytorch/convert.py"
"$py" - "$tmp" "$src/scripts/pytorch" <<'PY' || fails=$((fails + 1))
import sys, torch
tmp = sys.argv[1]; sys.path.insert(0, sys.argv[2])
import hgrn_torch as ht
sd = ht.HgrnVit(ht.ModelConfig(mixer="hgru2", image_size=16, patch_size=4, dim=32, depth=2, glu_dim=48,
                               num_classes=5, head_size=8)).state_dict()
torch.save({"model": sd}, f"{tmp}/h2.pth")
torch.save({k: v for k, v in sd.items() if k != "layers.1.token_mixer.norm.bias"}, f"{tmp}/missing.pth")
bad = dict(sd); bad["layers.0.feature_mixer.l3.weight"] = torch.zeros(32, 40)
torch.save({"state_dict": bad}, f"{tmp}/shape.pth")
for name, value in (("nan", float("nan")), ("inf", float("-inf"))):
    bad = {k: v.clone() for k, v in sd.items()}
    bad["layers.1.token_mixer.in_proj.weight"][3, 5] = value
    torch.save({"model": bad}, f"{tmp}/{name}.pth")
PY
expect_error h2-head-size "pass --head-size" -- "$py" "$conv" import "$tmp/h2.pth" "$tmp/h2.safetensors" --image-size 16
expect_error missing-tensor "layers.1.token_mixer.norm.bias' is missing" -- "$py" "$conv" import "$tmp/missing.pth" "$tmp/m.safetensors" --image-size 16 --head-size 8
expect_error wrong-shape "l3.weight' has shape \[32, 40\]" -- "$py" "$conv" import "$tmp/shape.pth" "$tmp/s.safetensors" --image-size 16 --head-size 8
expect_error causal-hgru2 "the hgru2 mixer is bidirectional only" -- "$py" "$conv" import "$tmp/h2.pth" "$tmp/c.safetensors" --image-size 16 --head-size 8 --causal 1
expect_error nan-tensor "tensor 'layers.1.token_mixer.in_proj.weight' holds 1 non-finite value" -- "$py" "$conv" import "$tmp/nan.pth" "$tmp/n.safetensors" --image-size 16 --head-size 8
expect_error inf-tensor "tensor 'layers.1.token_mixer.in_proj.weight' holds 1 non-finite value" -- "$py" "$conv" import "$tmp/inf.pth" "$tmp/i.safetensors" --image-size 16 --head-size 8
[ -e "$tmp/n.safetensors" ] || [ -e "$tmp/i.safetensors" ] && { echo "FAIL non-finite: an output was written"; fails=$((fails + 1)); }
expect_error not-safetensors "h2.pth: not a safetensors file" -- "$py" "$conv" export "$tmp/h2.pth" "$tmp/x.pth"
# an imported checkpoint is enough for hgrn: classify a generated image with it
if "$py" "$conv" import "$tmp/h2.pth" "$tmp/h2.safetensors" --image-size 16 --head-size 8 >/dev/null &&
   "$hgrn" bench-data --synth "$tmp/img" 1 40x30 >/dev/null &&
   "$hgrn" classify --ckpt "$tmp/h2.safetensors" --device cpu --json "$tmp/img" >"$tmp/cls.json" 2>"$tmp/cls.err" &&
   grep -q '"top": \[{"index": [0-4], "class": "class [0-4]"' "$tmp/cls.json"; then
  echo "ok   imported-classify: $(head -c 100 "$tmp/cls.json")"
else
  echo "FAIL imported-classify:"; cat "$tmp/cls.json" "$tmp/cls.err"; fails=$((fails + 1))
fi
# an HGRN2 export records its head size: imported again without --head-size it
# keeps head 8; without the record it is refused; a contradicting --head-size too
if "$py" "$conv" export "$tmp/h2.safetensors" "$tmp/h2x.pth" >/dev/null &&
   "$py" "$conv" import "$tmp/h2x.pth" "$tmp/h2x.safetensors" >"$tmp/out" 2>"$tmp/err" &&
   "$py" - "$tmp" "$src/scripts/pytorch" <<'PY'
import sys, torch
tmp = sys.argv[1]; sys.path.insert(0, sys.argv[2])
import convert
saved = torch.load(f"{tmp}/h2x.pth")
assert saved["head_size"] == 8, saved.get("head_size")
assert convert.read_checkpoint(f"{tmp}/h2x.safetensors")[1].head_size == 8
del saved["head_size"]
torch.save(saved, f"{tmp}/h2x_norecord.pth")
PY
then
  echo "ok   h2-export-head-size: recorded 8, imported back with head 8"
else
  echo "FAIL h2-export-head-size:"; cat "$tmp/err"; fails=$((fails + 1))
fi
expect_error h2-export-without-record "pass --head-size" -- "$py" "$conv" import "$tmp/h2x_norecord.pth" "$tmp/h2y.safetensors"
expect_error h2-head-size-contradicts "--head-size 4: .*records head_size 8" -- "$py" "$conv" import "$tmp/h2x.pth" "$tmp/h2z.safetensors" --head-size 4
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
