#!/usr/bin/env python3
"""parity.py --hgrn PATH/TO/hgrn [--device cpu|cuda] [--mixers hgru1,lru,...] [--keep DIR]

Checks hgrn against the PyTorch implementation (hgrn_torch.py) and the
weight conversion both ways (convert.py), for every token mixer hgrn has
registered (`hgrn info --mixers`), bidirectional and, for the mixers with a
causal mode (LRU, minGRU, minLSTM), causal too, on a tiny model (16x16 RGB,
patch 4, 16 tokens, d 32, depth 3, GLU 48, 7 classes; HGRU2 heads of 8;
model.rnn_dim 24, so that the scan mixers' width differs from d):

  1. random weights (every tensor perturbed away from its initial value, so
     that norms, biases, lower bounds and rotations all carry gradient; LRU's
     |lambda| uniform in [0.5, 0.99]), exported to an hgrn checkpoint;
  2. `hgrn forward --grads` on 5 random uint8 images with random soft
     targets (fp32: --precision fp32 on CUDA), and the same batch through the
     PyTorch model in float32 and float64;
  3. probabilities within 1e-4 and every parameter gradient within 1e-3 of
     PyTorch's float32 values, relative: max |hgrn - torch| / max |torch| per
     tensor (the float64 figures are printed beside them);
  4. the checkpoint read back by convert.py equals the weights bit for bit;
     the same weights saved as the official OpenNLPLab code saves them
     (main.py's utils.save_on_master({"model":
     model_without_ddp.state_dict(), "optimizer": ..., "epoch": ...}): the
     state dict under "model", without DistributedDataParallel's "module."
     prefix, theta as [1, 1, d]) and imported give the same tensors bit for
     bit, and hgrn's probabilities on them are the same bits; so does a
     DistributedDataParallel model's own state dict (every name prefixed
     "module."); exported back to PyTorch they load strictly into the model
     and equal the originals, and an HGRN2 export records its head size;
  5. a mixer that has no causal mode in PyTorch is refused by hgrn with
     model.causal = 1 too.

A registered mixer without a PyTorch implementation in hgrn_torch.MIXERS is
a failure: every mixer hgrn trains has its reference. --self-test then also
checks that the comparison can fail: for every mixer and mode, a reference
with one plausible mistake (WRONG below: for HGRU1 and HGRU2 the HGRN2
paper's inclusive lower bounds, beta_l = sum_{i<=l} softmax(lower_bounds)_i
instead of the vision code's i < l; for the others a misread of their
layout or gates) must be told apart from hgrn.
Exit status 0 when everything holds, 1 otherwise."""
import argparse
import copy
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert  # noqa: E402
import hgrn_torch as ht  # noqa: E402

PROB_TOL = 1e-4
GRAD_TOL = 1e-3


def tiny_config(mixer, causal=0):
    return ht.ModelConfig(mixer=mixer, image_size=16, channels=3, patch_size=4, dim=32, depth=3, glu_dim=48,
                          num_classes=7, drop_path=0.1, head_size=8,
                          rnn_dim=0 if mixer in ("hgru1", "hgru2") else 24, causal=causal)


def perturb(model, gen):
    """Weights away from their initial values (every tensor's gradient then
    depends on it), at scales that keep activations of order one."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("theta_forward") or name.endswith("theta_reverse") or name.endswith(".theta"):
                p.copy_(torch.rand(p.shape, generator=gen) * 3.0)
            elif name.endswith(".nu_log"):       # LRU: |lambda| = exp(-exp(nu)) uniform in [0.5, 0.99]
                modulus = 0.5 + 0.49 * torch.rand(p.shape, generator=gen, dtype=torch.float64)
                p.copy_(torch.log(-torch.log(modulus)))
            elif name == "lower_bounds":
                p.copy_(torch.randn(p.shape, generator=gen))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def rel(a, b):
    a, b = a.double(), b.double()
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def torch_pass(model, images, targets):
    model.zero_grad()
    logits = model(images)
    loss = ht.soft_cross_entropy(logits, targets.to(logits.dtype))
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    per = -(targets.to(logits.dtype) * torch.log_softmax(logits, -1)).sum(-1)
    return logits.detach(), torch.softmax(logits, -1).detach(), per.detach(), grads


def hgrn_forward(hgrn, device, ckpt, inputs, out):
    cmd = [hgrn, "forward", "--ckpt", ckpt, "--inputs", inputs, "--out", out, "--grads", "--device", device]
    if device == "cuda":
        # fp32, and cuBLASLt's heuristic algorithm per shape rather than the
        # fastest by timing (train.gemm_tune), which two processes may pick
        # differently: the round trip through the converters is checked bit
        # for bit on the probabilities of two runs
        cmd += ["--precision", "fp32", "--train.gemm_tune", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    tensors, _ = ht.load_safetensors(out)
    return tensors


def check_mixer(hgrn, device, mixer, work, seed, quiet=False, causal=0):
    """Returns the list of failures (empty: every check held)."""
    fails = []
    say = (lambda *a, **k: None) if quiet else print
    cfg = tiny_config(mixer, causal)
    label = mixer + (" causal" if causal else "")
    gen = torch.Generator().manual_seed(seed)
    model = ht.HgrnVit(cfg)
    perturb(model, gen)
    model.eval()
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    classes = [f"c{k}" for k in range(cfg.num_classes)]
    base = os.path.join(work, mixer + ("-causal" if causal else ""))
    ckpt = base + ".safetensors"
    convert.write_checkpoint(ckpt, sd, convert.config_text(cfg), classes)

    B = 5
    images = torch.randint(0, 256, (B, cfg.channels, cfg.image_size, cfg.image_size), dtype=torch.uint8,
                           generator=gen)
    targets = torch.softmax(2 * torch.randn(B, cfg.num_classes, generator=gen), -1).float()
    inputs = base + ".inputs.safetensors"
    ht.save_safetensors(inputs, {"images": images, "targets": targets})

    out = hgrn_forward(hgrn, device, ckpt, inputs, base + ".out.safetensors")
    logits32, probs32, loss32, grads32 = torch_pass(model, images, targets)
    model64 = copy.deepcopy(model).double()
    logits64, probs64, loss64, grads64 = torch_pass(model64, images, targets)

    def report(what, value, ref32, ref64, tol):
        e32, e64, t64 = rel(value, ref32), rel(value, ref64), rel(ref32, ref64)
        ok = e32 <= tol
        say(f"  {label:14s} {what:52s} {e32:9.2e} {e64:9.2e} {t64:9.2e}  {'ok' if ok else 'FAIL'} (<= {tol:g})")
        if not ok:
            fails.append(f"{label}: {what}: {e32:.3g} > {tol:g}")

    say(f"  {'mixer':14s} {'tensor':52s} {'vs fp32':>9s} {'vs fp64':>9s} {'torch32':>9s}")
    report("probabilities", out["probs"], probs32, probs64, PROB_TOL)
    report("logits", out["logits"], logits32, logits64, PROB_TOL)
    report("per-sample loss", out["loss"], loss32, loss64, PROB_TOL)
    worst = (0.0, "")
    for name in sd:
        key = "grad." + name
        if key not in out:
            fails.append(f"{label}: hgrn wrote no gradient for {name}")
            continue
        e = rel(out[key], grads32[name])
        if e > worst[0]:
            worst = (e, name)
        if e > GRAD_TOL:
            report("grad " + name, out[key], grads32[name], grads64[name], GRAD_TOL)
    if worst[1]:
        report(f"grad, worst of {len(sd)}: {worst[1]}", out["grad." + worst[1]], grads32[worst[1]],
               grads64[worst[1]], GRAD_TOL)

    # the checkpoint read back
    back, bcfg, _, bclasses = convert.read_checkpoint(ckpt)
    if any(not torch.equal(back[k], sd[k]) for k in sd) or bclasses != classes or bcfg.mixer != mixer:
        fails.append(f"{label}: the checkpoint read back differs from the weights written")

    # an official-layout PyTorch checkpoint (hgrn's own names for the mixers
    # without official vision code) -> hgrn -> the same bits
    official = base + ".official.pth"
    torch.save({"model": dict(sd), "optimizer": {}, "epoch": 299}, official)
    imported = base + ".imported.safetensors"
    convert.import_(official, imported, cfg.image_size, cfg.channels, cfg.head_size if mixer == "hgru2" else 0,
                    None, None, causal)
    imp, icfg, _, _ = convert.read_checkpoint(imported)
    if any(not torch.equal(imp[k], sd[k]) for k in sd):
        fails.append(f"{label}: the imported official checkpoint's tensors differ")
    ddp = base + ".ddp.pth"
    torch.save({"module." + k: v for k, v in sd.items()}, ddp)
    convert.import_(ddp, base + ".ddp.safetensors", cfg.image_size, cfg.channels,
                    cfg.head_size if mixer == "hgru2" else 0, None, None, causal)
    if any(not torch.equal(v, sd[k]) for k, v in convert.read_checkpoint(base + ".ddp.safetensors")[0].items()):
        fails.append(f"{label}: the imported DistributedDataParallel state dict's tensors differ")
    if (icfg.mixer, icfg.rnn_dim or icfg.dim, icfg.causal) != (mixer, cfg.rnn_dim or cfg.dim, causal):
        fails.append(f"{label}: the imported checkpoint's model differs: {icfg.mixer}, rnn_dim {icfg.rnn_dim}, "
                     f"causal {icfg.causal}")
    out2 = hgrn_forward(hgrn, device, imported, inputs, base + ".out2.safetensors")
    if not torch.equal(out2["probs"], out["probs"]):
        fails.append(f"{label}: hgrn's probabilities on the imported weights differ from the originals'")

    # hgrn -> PyTorch
    exported = base + ".exported.pth"
    convert.export(ckpt, exported)
    m2 = ht.HgrnVit(cfg)
    saved = torch.load(exported, map_location="cpu")
    m2.load_state_dict(saved["model"], strict=True)
    if saved.get("head_size") != (cfg.head_size if mixer == "hgru2" else None):
        fails.append(f"{label}: the export records head_size {saved.get('head_size')!r}")
    if any(not torch.equal(m2.state_dict()[k], sd[k]) for k in sd):
        fails.append(f"{label}: the exported state dict differs from the weights")
    say(f"  {label:14s} conversion: checkpoint read back, official layout imported, exported to PyTorch: "
        f"{'ok' if not [f for f in fails if 'differ' in f] else 'FAIL'}")
    return fails


def check_causal_refused(hgrn, device, mixer, work):
    """A mixer without a causal mode in PyTorch: hgrn must refuse
    model.causal = 1 as well (else hgrn runs a model with no reference)."""
    cfg = tiny_config(mixer)
    sd = ht.HgrnVit(cfg).state_dict()
    cfg.causal = 1
    ckpt = os.path.join(work, f"{mixer}-causal.safetensors")
    convert.write_checkpoint(ckpt, sd, convert.config_text(cfg))
    inputs = os.path.join(work, f"{mixer}-causal.inputs.safetensors")
    ht.save_safetensors(inputs, {"images": torch.zeros(1, cfg.channels, cfg.image_size, cfg.image_size,
                                                       dtype=torch.uint8)})
    try:
        hgrn_forward(hgrn, device, ckpt, inputs, os.path.join(work, f"{mixer}-causal.out.safetensors"))
    except RuntimeError as e:
        if "model.causal" in str(e):
            print(f"  {mixer + ' causal':14s} refused by hgrn as by PyTorch: ok")
            return []
        return [f"{mixer} causal: hgrn failed otherwise than by refusing model.causal = 1: {e}"]
    return [f"{mixer} causal: hgrn runs it, but the PyTorch reference has no causal mode"]


# ---------------------------------------------------------------- the self-test's wrong references

def inclusive_bounds_forward(self, images):
    """HgrnVit.forward with the HGRN2 paper's lower bounds (beta_l includes
    P_l)."""
    x = self.to_patch_embedding(self.normalise(images))
    p = torch.softmax(self.lower_bounds, dim=0)
    beta = torch.zeros_like(p[0])
    for i, block in enumerate(self.layers):
        beta = beta + p[i]
        x = block(x, beta)
    return self.head(x.mean(dim=1))


def lru_c_unconjugated(self):
    """C's columns read as (Re C_k, Im C_k): y = Re(conj(C) h)."""
    cols = self.C.reshape(self.C.shape[0], -1, 2)
    return torch.complex(cols[..., 0], cols[..., 1])


def mingru_gates_swapped(z, h_tilde):
    """h_t = z_t h_{t-1} + (1 - z_t) h~_t (torch.nn.GRU's convention)."""
    z = torch.sigmoid(z)
    return z, (1 - z) * h_tilde


def minlstm_gates_unnormalised(f, i, h_tilde):
    """h_t = sigmoid(f_t) h_{t-1} + sigmoid(i_t) h~_t (without f' + i' = 1)."""
    return torch.sigmoid(f), torch.sigmoid(i) * h_tilde


# mixer -> (what is wrong, the class, the attribute replaced, the replacement)
WRONG = {
    "hgru1": ("inclusive lower bounds", ht.HgrnVit, "forward", inclusive_bounds_forward),
    "hgru2": ("inclusive lower bounds", ht.HgrnVit, "forward", inclusive_bounds_forward),
    "lru": ("C's columns as (Re C, Im C)", ht.Lru, "complex_c", lru_c_unconjugated),
    "mingru": ("z and 1 - z swapped", ht.MinGru, "gates", staticmethod(mingru_gates_swapped)),
    "minlstm": ("unnormalised gates", ht.MinLstm, "gates", staticmethod(minlstm_gates_unnormalised)),
}


def self_test(hgrn, device, mixer, work, seed, causal):
    label = mixer + (" causal" if causal else "")
    if mixer not in WRONG:
        return [f"{label}: the self-test has no wrong reference for it (add one to WRONG in parity.py)"]
    what, cls, attr, wrong = WRONG[mixer]
    right = cls.__dict__[attr]
    setattr(cls, attr, wrong)
    try:
        caught = check_mixer(hgrn, device, mixer, work, seed, quiet=True, causal=causal)
    finally:
        setattr(cls, attr, right)
    print(f"  {label:14s} self-test: a reference with {what} "
          f"{'is caught (' + str(len(caught)) + ' tensors differ)' if caught else 'PASSED: not caught'}")
    return [] if caught else [f"{label}: the self-test's wrong reference ({what}) was not told apart from hgrn"]


def registered_mixers(hgrn):
    r = subprocess.run([hgrn, "info", "--mixers"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{hgrn} info --mixers failed: {r.stderr.strip()}")
    return [line.split()[0] for line in r.stdout.splitlines()[1:] if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hgrn", required=True, help="the hgrn binary")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--mixers", help="comma-separated (default: every registered mixer; each in every mode "
                                     "it has, bidirectional and causal)")
    ap.add_argument("--keep", help="write the files here and keep them (default: a temporary directory)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--self-test", action="store_true", help="also check that a wrong reference is caught")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    mixers = a.mixers.split(",") if a.mixers else registered_mixers(a.hgrn)
    print(f"parity: hgrn ({a.device}, fp32) against PyTorch {torch.__version__} (float32; float64 for reference); "
          f"mixers: {', '.join(mixers)}")
    fails = []
    with tempfile.TemporaryDirectory() as tmp:
        work = a.keep or tmp
        os.makedirs(work, exist_ok=True)
        for mixer in mixers:
            if mixer not in ht.MIXERS:
                fails.append(f"{mixer}: registered in hgrn but has no PyTorch implementation "
                             f"(add it to MIXERS in scripts/pytorch/hgrn_torch.py)")
                print(f"  {mixer:6s} NO PyTorch implementation")
                continue
            for causal in ((0, 1) if ht.MIXERS[mixer].supports_causal else (0,)):
                try:
                    fails += check_mixer(a.hgrn, a.device, mixer, work, a.seed, causal=causal)
                except (RuntimeError, ValueError, OSError) as e:
                    fails.append(f"{mixer}{' causal' if causal else ''}: {e}")
            if not ht.MIXERS[mixer].supports_causal:
                fails += check_causal_refused(a.hgrn, a.device, mixer, work)
        if a.self_test:
            for mixer in (m for m in mixers if m in ht.MIXERS):
                for causal in ((0, 1) if ht.MIXERS[mixer].supports_causal else (0,)):
                    try:
                        fails += self_test(a.hgrn, a.device, mixer, work, a.seed, causal)
                    except (RuntimeError, ValueError, OSError) as e:
                        fails.append(f"{mixer}{' causal' if causal else ''}: self-test: {e}")
    if fails:
        print("parity: FAILED\n  " + "\n  ".join(fails))
        return 1
    print("parity: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
