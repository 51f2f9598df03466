#!/usr/bin/env python3
"""convert.py - weights between hgrn checkpoints (safetensors) and PyTorch
state dicts, both ways.

  convert.py export CKPT.safetensors OUT.pth
      An hgrn checkpoint as a PyTorch checkpoint: {"model": state_dict,
      "hgrn_config": config text, "classes": [names]} and, for HGRN2,
      "head_size": e (DeiT's layout, whose main.py and the official HGRN
      code read checkpoint["model"]). The state dict loads strictly into
      hgrn_torch.HgrnVit and into the official Hgrn1dVit (param_share=False)
      / the HGRN2 vision model; HGRN2's tensors do not fix the head size (a
      state dict loads into a model of any head size and computes another
      model), hence "head_size" beside them.

  convert.py import IN.pth OUT.safetensors [--image-size 224] [--channels 3]
                    [--head-size E] [--causal 0|1] [--config BASE.cfg]
                    [--classes FILE]
      A PyTorch checkpoint (one saved from hgrn_torch or by export, or by the
      official OpenNLPLab code, whose main.py saves
      model_without_ddp.state_dict() under "model", without a "module."
      prefix; also the state dict itself or under "model_ema", "state_dict",
      and a DistributedDataParallel model's "module." prefix dropped) as an
      hgrn checkpoint that `hgrn eval` / `hgrn classify` / `hgrn train
      --resume`-free fine-tuning read. The model's shape comes from the
      tensors, the token mixer too (HGRU1, HGRU2, LRU, minGRU, minLSTM, and
      model.rnn_dim of the last three); what they do not record must be
      given: the HGRN2 head size (--head-size, the official expand_ratio;
      a file export wrote records it, and --head-size must then agree),
      whether an LRU / minGRU / minLSTM model is causal (--causal 1; default:
      the base config's model.causal, else bidirectional), the image size
      (default 224) and the channels (default 3). --config takes the recipe
      and data keys from a config file (its [model] keys must agree with the
      tensors); --classes names the classes (one per line).

Every tensor is checked against the model the config describes (names,
shapes) and must hold finite values: a missing or unexpected tensor, or one
holding a NaN or an infinity, is an error naming it."""
import argparse
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hgrn_torch as ht  # noqa: E402

FORMAT_TAG = "hgrn-ckpt-1"


def state_dict_of(obj, path):
    """The parameter dict inside a loaded PyTorch checkpoint."""
    if isinstance(obj, dict):
        for key in ("model", "model_ema", "state_dict"):
            if key in obj and isinstance(obj[key], dict):
                return state_dict_of(obj[key], path)
        tensors = {k: v for k, v in obj.items() if torch.is_tensor(v)}
        if tensors:
            if all(k.startswith("module.") for k in tensors):
                tensors = {k[len("module."):]: v for k, v in tensors.items()}
            return tensors
    raise ValueError(f"{path}: no state dict found (looked for a dict of tensors, or one under "
                     f"'model', 'model_ema', 'state_dict')")


def infer_config(sd, image_size, channels, head_size, path, causal=0):
    """The ModelConfig the tensors describe."""
    def need(name):
        if name not in sd:
            raise ValueError(f"{path}: tensor '{name}' is missing (is this an HGRN vision model?)")
        return sd[name]

    w = need("to_patch_embedding.1.weight")
    dim, patch_dim = w.shape
    p = math.isqrt(patch_dim // channels)
    if p * p * channels != patch_dim:
        raise ValueError(f"{path}: to_patch_embedding.1.weight has {patch_dim} inputs, not p*p*{channels} "
                         f"for any patch size p (--channels?)")
    depth = 1 + max(int(m.group(1)) for m in (re.match(r"layers\.(\d+)\.", k) for k in sd) if m)
    tm = "layers.0.token_mixer."
    width = 0                                       # rnn_dim: LRU states, minGRU / minLSTM hidden width
    if tm + "input_proj.weight" in sd:
        mixer = "hgru1"
        if tm + "theta_forward" not in sd:
            raise ValueError(f"{path}: an HGRU1 mixer without theta_forward / theta_reverse: the official "
                             f"Hgru1d (param_share=True) is not the bidirectional BiHgru1d this model uses")
    elif tm + "in_proj.weight" in sd and any(k.startswith(tm + "norm.") for k in sd):
        mixer = "hgru2"
        if not head_size:
            raise ValueError(f"{path}: an HGRN2 state dict does not record its head size (the official "
                             f"expand_ratio): pass --head-size E")
    elif tm + "nu_log" in sd:
        mixer, width = "lru", sd[tm + "nu_log"].shape[0]
    elif tm + "in_proj.weight" in sd:               # minGRU [z | h~] or minLSTM [f | i | h~]
        width = need(tm + "out_proj.weight").shape[1]
        parts = sd[tm + "in_proj.weight"].shape[0] // width
        mixer = {2: "mingru", 3: "minlstm"}.get(parts)
        if mixer is None or parts * width != sd[tm + "in_proj.weight"].shape[0]:
            raise ValueError(f"{path}: {tm}in_proj.weight has {sd[tm + 'in_proj.weight'].shape[0]} rows, not 2 "
                             f"(minGRU) or 3 (minLSTM) times out_proj's {width} inputs")
    else:
        raise ValueError(f"{path}: layers.0.token_mixer has none of input_proj (HGRN1), in_proj and norm (HGRN2), "
                         f"nu_log (LRU), in_proj and out_proj (minGRU, minLSTM)")
    if causal and not ht.MIXERS[mixer].supports_causal:
        raise ValueError(f"--causal 1: the {mixer} mixer is bidirectional only")
    if image_size % p:
        raise ValueError(f"--image-size {image_size} is not a multiple of the patch size {p}")
    return ht.ModelConfig(mixer=mixer, image_size=image_size, channels=channels, patch_size=p, dim=dim,
                          depth=depth, glu_dim=need("layers.0.feature_mixer.l1.weight").shape[0],
                          num_classes=need("head.1.weight").shape[0], head_size=head_size or 16,
                          rnn_dim=0 if width == dim else width, causal=int(bool(causal)))


def check_tensors(sd, cfg, path):
    """sd holds exactly the tensors of the model cfg describes, with its shapes."""
    want = ht.HgrnVit(cfg).state_dict()
    for name, t in want.items():
        if name not in sd:
            raise ValueError(f"{path}: tensor '{name}' is missing")
        if tuple(sd[name].shape) != tuple(t.shape):
            raise ValueError(f"{path}: tensor '{name}' has shape {list(sd[name].shape)}, the model "
                             f"expects {list(t.shape)}")
        bad = int((~torch.isfinite(sd[name].detach().to(torch.float32))).sum())
        if bad:
            raise ValueError(f"{path}: tensor '{name}' holds {bad} non-finite value{'s' if bad > 1 else ''} "
                             f"(NaN or infinity)")
    for name in sd:
        if name not in want:
            raise ValueError(f"{path}: tensor '{name}' is not part of the {cfg.mixer} model")
    return {name: sd[name].detach().to(torch.float32).contiguous() for name in want}


def config_text(cfg, base_text=None, base_dir=None):
    """An hgrn config: the base config's keys, the model's shape from cfg.
    Files the base names relative to its directory (base_dir) are made
    absolute, as hgrn stores them; ones that are not there are dropped."""
    sections = ht.parse_config(base_text) if base_text else {"model": {}, "train": {}, "data": {}}
    model = sections.setdefault("model", {})
    if base_text:
        for k in ("mixer", "channels", "patch_size", "dim", "depth", "glu_dim", "num_classes", "head_size",
                  "rnn_dim"):
            if k not in model or (k == "head_size" and cfg.mixer != "hgru2") or (k == "rnn_dim" and cfg.mixer
                                                                                   in ("hgru1", "hgru2")):
                continue
            said, have = str(model[k]), str(getattr(cfg, k))
            if k == "rnn_dim":                      # 0 means model.dim
                said, have = str(int(said) or cfg.dim), str(cfg.rnn_dim or cfg.dim)
            if said != have:
                raise ValueError(f"the config says model.{k} = {model[k]}, the tensors say {getattr(cfg, k)}")
    for k in ht.MODEL_KEYS:
        model[k] = getattr(cfg, k)
    data = sections.setdefault("data", {})
    data.setdefault("mean", ",".join(repr(float(x)) for x in cfg.mean[:cfg.channels]))
    data.setdefault("std", ",".join(repr(float(x)) for x in cfg.std[:cfg.channels]))
    for k in ("class_names", "val_labels", "path"):
        if data.get(k) and not os.path.isabs(data[k]):
            full = os.path.join(base_dir or ".", data[k])
            data[k] = os.path.abspath(full) if base_dir and os.path.exists(full) else ""
    return ht.write_config(sections)


def write_checkpoint(path, tensors, cfg_text, classes=None, step=0):
    meta = {"format": FORMAT_TAG, "config": cfg_text, "step": str(step)}
    if classes:
        meta["classes"] = "".join(c + "\n" for c in classes)
    ht.save_safetensors(path, tensors, meta)


def read_checkpoint(path):
    """An hgrn checkpoint -> (state dict, ModelConfig, config text, class names)."""
    tensors, meta = ht.load_safetensors(path)
    if meta.get("format") != FORMAT_TAG or "config" not in meta:
        raise ValueError(f"{path}: not an hgrn checkpoint (metadata 'format' = {meta.get('format')!r}, "
                         f"expected {FORMAT_TAG!r})")
    cfg = ht.model_config_from_text(meta["config"])
    classes = [c for c in meta.get("classes", "").split("\n") if c] or None
    return check_tensors(tensors, cfg, path), cfg, meta["config"], classes


def export(src, dst):
    sd, cfg, text, classes = read_checkpoint(src)
    model = ht.HgrnVit(cfg)
    model.load_state_dict(sd, strict=True)
    out = {"model": model.state_dict(), "hgrn_config": text, "classes": classes}
    if cfg.mixer == "hgru2":
        out["head_size"] = cfg.head_size
    torch.save(out, dst)
    return f"{dst}: {cfg.mixer} state dict, {sum(t.numel() for t in sd.values())} parameters"


def recorded_head_size(obj, given, path):
    """The HGRN2 head size: --head-size (given, 0 if not), else the one
    export() recorded beside the state dict; both must agree. 0 when
    neither says (infer_config refuses an HGRN2 state dict then)."""
    said = obj.get("head_size") if isinstance(obj, dict) else None
    if said is None:
        return given
    if isinstance(said, bool) or not isinstance(said, int) or said <= 0:
        raise ValueError(f"{path}: 'head_size' is {said!r}, not a positive integer")
    if given and given != said:
        raise ValueError(f"--head-size {given}: {path} records head_size {said}")
    return said


def import_(src, dst, image_size, channels, head_size, config_path, classes_path, causal=None):
    """causal: 0 or 1, or None for the base config's model.causal (else 0)."""
    obj = torch.load(src, map_location="cpu")
    sd = state_dict_of(obj, src)
    base = None
    if config_path:
        with open(config_path) as f:
            base = f.read()
    elif isinstance(obj, dict) and isinstance(obj.get("hgrn_config"), str):
        base = obj["hgrn_config"]          # a file export() wrote
        bcfg = ht.model_config_from_text(base)
        image_size, channels = bcfg.image_size, bcfg.channels
    head_size = recorded_head_size(obj, head_size, src)
    if causal is None:
        causal = ht.model_config_from_text(base).causal if base else 0
    cfg = infer_config(sd, image_size, channels, head_size, src, causal)
    if base:
        b = ht.model_config_from_text(base)
        cfg.mean, cfg.std, cfg.drop_path = b.mean, b.std, b.drop_path
        cfg.lru_r_min, cfg.lru_r_max, cfg.lru_max_phase = b.lru_r_min, b.lru_r_max, b.lru_max_phase
    tensors = check_tensors(sd, cfg, src)
    classes = None
    if classes_path:
        with open(classes_path) as f:
            classes = [line.rstrip("\r\n") for line in f if line.strip()]
    elif isinstance(obj, dict) and isinstance(obj.get("classes"), list):
        classes = obj["classes"]
    if classes is not None and len(classes) != cfg.num_classes:
        raise ValueError(f"{classes_path or src}: {len(classes)} class names, the model has {cfg.num_classes}")
    write_checkpoint(dst, tensors, config_text(cfg, base, os.path.dirname(os.path.abspath(config_path))
                                               if config_path else None), classes)
    shape = f", rnn_dim {cfg.rnn_dim or cfg.dim}{', causal' if cfg.causal else ''}" if cfg.mixer not in (
        "hgru1", "hgru2") else ""
    return (f"{dst}: {cfg.mixer}{shape}, dim {cfg.dim}, depth {cfg.depth}, patch {cfg.patch_size}, "
            f"glu {cfg.glu_dim}, {cfg.num_classes} classes, {sum(t.numel() for t in tensors.values())} parameters")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="hgrn safetensors -> PyTorch checkpoint")
    e.add_argument("src")
    e.add_argument("dst")
    i = sub.add_parser("import", help="PyTorch checkpoint -> hgrn safetensors")
    i.add_argument("src")
    i.add_argument("dst")
    i.add_argument("--image-size", type=int, default=224)
    i.add_argument("--channels", type=int, default=3)
    i.add_argument("--head-size", type=int, default=0, help="HGRN2: the head size e (official expand_ratio)")
    i.add_argument("--causal", type=int, choices=[0, 1], default=None,
                   help="LRU / minGRU / minLSTM: 1 for a causal model (default: --config's model.causal, else 0)")
    i.add_argument("--config", help="take the [train] and [data] keys from this hgrn config")
    i.add_argument("--classes", help="class names, one per line")
    a = ap.parse_args()
    try:
        if a.cmd == "export":
            print(export(a.src, a.dst))
        else:
            print(import_(a.src, a.dst, a.image_size, a.channels, a.head_size, a.config, a.classes, a.causal))
    except (ValueError, OSError, KeyError) as ex:
        print(f"convert.py {a.cmd}: {ex}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
