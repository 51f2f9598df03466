#!/usr/bin/env bash
# End-to-end robustness through the real command line:
#  1. a training run killed with SIGKILL (twice, at different moments) resumes
#     from its last checkpoint and finishes, with valid checkpoints throughout;
#  2. an ImageFolder tree with a corrupt JPEG, a zero-byte file and a text file
#     named .jpg trains: each bad file is reported once with its path, skipped,
#     and counted; the run finishes.
# usage: test_robustness.sh HGRN_BINARY SOURCE_DIR
set -u
hgrn=$1; src=$2
tmp=$(mktemp -d); [ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT; echo "work dir $tmp"
fails=0; passed=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
cfg=$src/configs/fmnist_hgrn1_tiny.cfg

# ---- 1. kill -9 and resume (needs Fashion-MNIST) ----
if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  args=(--config "$cfg" --device cpu --threads 2 --out "$tmp/k" --model.dim 16 --model.depth 2 --model.glu_dim 32
        --train.batch_size 64 --data.train_limit 4096 --data.val_limit 256 --train.epochs 10 --train.log_every 1)
  ok=1
  for round in 1 2; do
    "$hgrn" train "${args[@]}" $([ $round = 2 ] && echo --resume) >"$tmp/k$round.log" 2>&1 &
    pid=$!
    # wait for a checkpoint newer than the one we started from, then kill at once
    before=$(stat -c %Y.%s "$tmp/k/last.safetensors" 2>/dev/null || echo none)
    for _ in $(seq 1 600); do
      now=$(stat -c %Y.%s "$tmp/k/last.safetensors" 2>/dev/null || echo none)
      [ "$now" != "$before" ] && [ "$now" != none ] && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.05
    done
    sleep 0.$((round * 3))
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    # the kill must have landed mid-run, or this proves nothing
    grep -q "^done:" "$tmp/k$round.log" && { fail "kill round $round came after the run had finished"; ok=0; }
    if ! "$hgrn" eval --ckpt "$tmp/k/last.safetensors" --device cpu >"$tmp/e$round.log" 2>&1; then
      fail "kill round $round: last.safetensors unreadable after SIGKILL: $(tail -1 "$tmp/e$round.log")"; ok=0
    fi
  done
  if ! "$hgrn" train "${args[@]}" --resume >"$tmp/k3.log" 2>&1; then
    fail "resume after two kills: $(tail -1 "$tmp/k3.log")"; ok=0
  fi
  grep -q "resumed from" "$tmp/k3.log" || { fail "the final run did not resume"; ok=0; }
  steps=$(grep -o '"step": [0-9]*' "$tmp/k/metrics.jsonl" | tail -1 | grep -o '[0-9]*$')
  [ "$steps" = 640 ] || { fail "after resuming, the last logged step is '$steps', want 640 (10 epochs x 64)"; ok=0; }
  [ $ok = 1 ] && { echo "ok   killed twice with SIGKILL, resumed, finished at step $steps"; passed=$((passed + 1)); }
else
  echo "skip kill/resume: Fashion-MNIST not installed"
fi

# ---- 2. bad files in an ImageFolder tree ----
"$hgrn" bench-data --synth "$tmp/synth" 12 64x48 >/dev/null 2>&1 || { fail "bench-data --synth"; }
mkdir -p "$tmp/tree/train/cats" "$tmp/tree/train/dogs" "$tmp/tree/val/cats" "$tmp/tree/val/dogs"
i=0
for f in "$tmp"/synth/*.jpg; do
  case $((i % 4)) in 0) d=train/cats ;; 1) d=train/dogs ;; 2) d=val/cats ;; 3) d=val/dogs ;; esac
  cp "$f" "$tmp/tree/$d/$i.jpg"; i=$((i + 1))
done
head -c 300 "$tmp/synth/$(ls "$tmp/synth" | sed -n 1p)" >"$tmp/tree/train/cats/truncated.jpg"
: >"$tmp/tree/train/dogs/empty.jpg"
echo "not a picture" >"$tmp/tree/train/dogs/notes.jpg"
if "$hgrn" train --config "$cfg" --device cpu --out "$tmp/b" --data.dataset imagefolder --data "$tmp/tree" \
     --model.image_size 32 --model.channels 3 --model.patch_size 8 --model.dim 8 --model.depth 1 --model.glu_dim 8 \
     --model.num_classes 2 --data.mean 0.5,0.5,0.5 --data.std 0.25,0.25,0.25 --data.class_names "" \
     --train.batch_size 2 --train.epochs 2 >"$tmp/b.log" 2>&1; then
  ok=1
  for bad in truncated.jpg empty.jpg notes.jpg; do
    n=$(grep -c "$bad" "$tmp/b.log")
    [ "$n" = 1 ] || { fail "bad file $bad reported $n times (want exactly once):"; grep "$bad" "$tmp/b.log"; ok=0; }
  done
  grep -qE "unreadable training files skipped|skipped" "$tmp/b.log" || { fail "no end-of-epoch count of skipped files"; ok=0; }
  [ $ok = 1 ] && { echo "ok   ImageFolder with 3 bad files: each reported once, skipped, counted; training finished"; passed=$((passed + 1)); }
else
  fail "training on a tree with bad files failed: $(tail -2 "$tmp/b.log")"
fi

echo "$passed passed, $fails failed"
[ $fails -eq 0 ]
