#!/usr/bin/env bash
# hgrn against the PyTorch implementation (scripts/pytorch/parity.py): every
# registered token mixer at tiny size, bidirectional and (LRU, minGRU,
# minLSTM) causal, probabilities within 1e-4 and every parameter gradient
# within 1e-3 of PyTorch's (fp32), the weight conversion both ways bit for
# bit, and a wrong reference caught for each (--self-test). Then convert.py's
# errors: an HGRN2 state dict without --head-size, a missing tensor, a wrong
# shape, a bidirectional-only mixer imported as causal. Needs a python3 with
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
PY
expect_error h2-head-size "pass --head-size" -- "$py" "$conv" import "$tmp/h2.pth" "$tmp/h2.safetensors" --image-size 16
expect_error missing-tensor "layers.1.token_mixer.norm.bias' is missing" -- "$py" "$conv" import "$tmp/missing.pth" "$tmp/m.safetensors" --image-size 16 --head-size 8
expect_error wrong-shape "l3.weight' has shape \[32, 40\]" -- "$py" "$conv" import "$tmp/shape.pth" "$tmp/s.safetensors" --image-size 16 --head-size 8
expect_error causal-hgru2 "the hgru2 mixer is bidirectional only" -- "$py" "$conv" import "$tmp/h2.pth" "$tmp/c.safetensors" --image-size 16 --head-size 8 --causal 1
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
[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
