#!/usr/bin/env python3
"""export_onnx.py CKPT OUT.onnx [--input uint8|float] [--opset N]

Writes an hgrn checkpoint's whole model as an ONNX graph (`hgrn export onnx`
runs this): images in, logits out. The math is DESIGN.md section 4 (and
scripts/pytorch/hgrn_torch.py, its PyTorch mirror), in evaluation mode: no
drop path, batch norm with its running statistics. Every token mixer
(HGRU1, HGRU2, LRU, minGRU, minLSTM), bidirectional or causal, on the 1-D
sequence or the 2-D scan (model.scan2d), with each norm choice
(model.norm, model.head_norm). The recurrences are ONNX Scan operators
(scripts/onnx_graph.py): the graph's size does not grow with the tokens.

Input "images": with --input uint8 (the default) uint8 [batch, C, S, S] at
model.image_size S (resizing is not part of the model), normalised inside
the graph with the checkpoint's data.mean / data.std as hgrn does it
(u8 * (1 / (255 std)) - mean / std); with --input float, float32 already
normalised. Output "logits": float32 [batch, classes]. The batch is a
symbolic dimension. The model's metadata holds the class names ("classes",
one per line), the hgrn config ("hgrn_config") and the input kind.

The graph is checked with onnx.checker.check_model(full_check=True) before
it is written (atomically: a temporary file, fsync, rename, fsync of the
directory).

--opset N: 17 (the default, where LayerNormalization appears) up to the
newest the installed onnx knows.

Exit status: 0 written; 2 refused before any work (bad arguments, CKPT
missing, OUT not writable); 1 failure while working (a checkpoint that
cannot be read or holds a model this cannot export, a graph the checker
refuses). Errors are one line on stderr. Needs onnx and numpy (Debian:
apt-get install python3-onnx; then run with /usr/bin/python3)."""
import math
import os
import sys

import ckpt_format
from out_path import check_output

PROG = "hgrn export onnx"
USAGE = "usage: hgrn export onnx CKPT OUT.onnx [--input uint8|float] [--opset N]"
MIXERS = ("hgru1", "hgru2", "lru", "mingru", "minlstm")
LN_EPS = 1e-5      # LayerNorm's epsilon (cpu backend LN_EPS)
BN_EPS = 1e-5      # batch norm's (batchnorm.c BN_EPS)
RMS_EPS = 1e-8     # SimpleRMSNorm's


class Refused(Exception):
    """exit 2: nothing done"""


class Failed(Exception):
    """exit 1: the work failed"""


# ---------------------------------------------------------------- arguments

def parse_args(argv):
    pos, opts = [], {"input": "uint8", "opset": 17}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--input", "--opset"):
            if i + 1 >= len(argv):
                raise Refused(f"{a} needs a value ({USAGE})")
            opts[a[2:]] = argv[i + 1]
            i += 2
            continue
        if a.startswith("--input=") or a.startswith("--opset="):
            k, v = a[2:].split("=", 1)
            opts[k] = v
        elif a.startswith("-") and len(a) > 1:
            raise Refused(f"unknown option {a} ({USAGE})")
        else:
            pos.append(a)
        i += 1
    if len(pos) != 2:
        raise Refused(("CKPT and OUT.onnx are required" if len(pos) < 2 else
                       f"unexpected argument '{pos[2]}'") + f" ({USAGE})")
    if opts["input"] not in ("uint8", "float"):
        raise Refused(f"--input {opts['input']}: must be uint8 or float")
    try:
        opts["opset"] = int(opts["opset"])
    except ValueError:
        raise Refused(f"--opset {opts['opset']}: not an integer") from None
    return pos[0], pos[1], opts


# ---------------------------------------------------------------- checkpoint

def read_safetensors(path, np):
    """-> ({name: float32 array}, {metadata}); F32 tensors only, as hgrn writes them."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Failed(f"{path}: {e.strerror}") from None
    try:
        header, meta, base = ckpt_format.safetensors_header(data, path)
    except ValueError as e:
        raise Failed(str(e)) from None
    tensors = {}
    for name, h in header.items():
        try:
            dtype, shape, (a, b) = h["dtype"], [int(s) for s in h["shape"]], h["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise Failed(f"{path}: tensor '{name}': a malformed header entry") from None
        if dtype != "F32":
            raise Failed(f"{path}: tensor '{name}' is {dtype}; hgrn checkpoints hold F32")
        count = math.prod(shape)
        if not (0 <= a <= b <= len(data) - base) or b - a != 4 * count:
            raise Failed(f"{path}: tensor '{name}': its data offsets [{a}, {b}] do not fit the file or its shape")
        t = np.frombuffer(data, dtype="<f4", count=count, offset=base + a).astype(np.float32).reshape(shape)
        bad = int(np.size(t) - np.count_nonzero(np.isfinite(t)))
        if bad:
            raise Failed(f"{path}: tensor '{name}' holds {bad} non-finite value(s) (a damaged checkpoint)")
        tensors[name] = t
    return tensors, meta


def parse_config(text):
    """ckpt_format.parse_config, its error as a Failed that names the checkpoint's config."""
    try:
        return ckpt_format.parse_config(text)
    except ckpt_format.ConfigLineError as e:
        raise Failed(f"the checkpoint's config, line {e.line}: expected 'key = value' under a [section]") from None


class Model:
    """The [model] keys the graph needs, and the input normalisation."""
    INTS = ("image_size", "channels", "patch_size", "dim", "depth", "glu_dim", "num_classes")
    DEFAULTS = {"head_size": "16", "rnn_dim": "0", "causal": "0", "norm": "layer", "head_norm": "rms",
                "scan2d": "0"}

    def __init__(self, text):
        sec = parse_config(text)
        m, d = sec.get("model", {}), sec.get("data", {})
        if "mixer" not in m:
            raise Failed("the checkpoint's config has no model.mixer")
        self.mixer = m["mixer"]
        try:
            for k in self.INTS:
                if k not in m:
                    raise Failed(f"the checkpoint's config has no model.{k}")
                setattr(self, k, int(m[k]))
            for k in ("head_size", "rnn_dim", "causal", "scan2d"):
                setattr(self, k, int(m.get(k, self.DEFAULTS[k])))
            self.mean = [float(x) for x in d.get("mean", "0.485,0.456,0.406").split(",")]
            self.std = [float(x) for x in d.get("std", "0.229,0.224,0.225").split(",")]
        except ValueError as e:
            raise Failed(f"the checkpoint's config: a value is not a number ({e})") from None
        self.norm = m.get("norm", self.DEFAULTS["norm"])
        self.head_norm = m.get("head_norm", self.DEFAULTS["head_norm"])
        if self.mixer not in MIXERS:
            raise Failed(f"model.mixer = {self.mixer} cannot be exported (this exporter knows "
                         f"{', '.join(MIXERS)})")
        if self.norm not in ("layer", "batch"):
            raise Failed(f"model.norm = {self.norm} cannot be exported (layer or batch)")
        if self.head_norm not in ("rms", "token", "none"):
            raise Failed(f"model.head_norm = {self.head_norm} cannot be exported (rms, token or none)")
        if self.patch_size < 1 or self.image_size % self.patch_size:
            raise Failed(f"model.image_size {self.image_size} is not a multiple of model.patch_size "
                         f"{self.patch_size}")
        if self.causal and self.mixer in ("hgru1", "hgru2"):
            raise Failed(f"model.causal = 1 with model.mixer = {self.mixer}, which is bidirectional only")
        self.side = self.image_size // self.patch_size
        self.tokens = self.side * self.side
        # the backbone's: the first `channels` values, mean 0 and std 1 past the list's end
        self.mean = [self.mean[c] if c < len(self.mean) else 0.0 for c in range(self.channels)]
        self.std = [self.std[c] if c < len(self.std) else 1.0 for c in range(self.channels)]


class Weights:
    """The checkpoint's tensors; take() checks each shape and marks it used,
    so that a tensor the graph does not read is found (a variant this
    exporter does not know) instead of silently ignored."""

    def __init__(self, tensors, path):
        self.t, self.path, self.used = tensors, path, set()

    def take(self, name, shape):
        if name not in self.t:
            raise Failed(f"{self.path}: tensor '{name}' is missing")
        a = self.t[name]
        if list(a.shape) != list(shape):
            raise Failed(f"{self.path}: tensor '{name}' has shape {list(a.shape)}, the config's model has {list(shape)}")
        self.used.add(name)
        return a

    def has(self, name):
        return name in self.t

    def check_all_used(self):
        left = sorted(set(self.t) - self.used)
        if left:
            raise Failed(f"{self.path}: tensor '{left[0]}' is not part of the model this exporter builds"
                         + (f" (and {len(left) - 1} more)" if len(left) > 1 else ""))


# ---------------------------------------------------------------- the model

def norm(g, w, np, cfg, name, x, width):
    """model.norm over the last axis: LayerNorm, or batch norm with its
    running statistics (evaluation), folded into one scale and shift per
    channel."""
    weight, bias = w.take(f"{name}.weight", [width]), w.take(f"{name}.bias", [width])
    if cfg.norm == "layer":
        return g.op("LayerNormalization", x, g.const(weight), g.const(bias), axis=-1, epsilon=LN_EPS)
    mean = w.take(f"{name}.running_mean", [width]).astype(np.float64)
    var = w.take(f"{name}.running_var", [width]).astype(np.float64)
    if (var < 0).any():
        raise Failed(f"{w.path}: tensor '{name}.running_var' holds a negative variance")
    scale = weight / np.sqrt(var + BN_EPS)
    return g.op("Add", g.op("Mul", x, g.const(scale)), g.const(bias - mean * scale))


def lower_bounds(w, np, cfg):
    """beta_l = sum_{i<l} softmax(lower_bounds)_i over the layers (exclusive)"""
    gamma = w.take("lower_bounds", [cfg.depth, cfg.dim]).astype(np.float64)
    p = np.exp(gamma - gamma.max(axis=0))
    p /= p.sum(axis=0)
    return np.concatenate([np.zeros((1, cfg.dim)), np.cumsum(p, axis=0)[:-1]]).astype(np.float32)


def lower_bounded(g, beta, pre):
    """lambda = beta + (1 - beta) sigmoid(pre)"""
    return g.op("Add", g.op("Mul", g.op("Sigmoid", pre), g.const(1 - beta)), g.const(beta))


def mixer_hgru1(g, w, np, og, cfg, p, x, beta, layout):
    D = cfg.dim
    win, bin_ = w.take(p + "input_proj.weight", [2 * D, D]), w.take(p + "input_proj.bias", [2 * D])
    # the input pairs are interleaved (re, im): one projection for each part
    u_re = g.silu(g.linear(x, win[0::2], bin_[0::2]))
    u_im = g.silu(g.linear(x, win[1::2], bin_[1::2]))
    lam = lower_bounded(g, beta, g.linear(x, w.take(p + "lambda_proj.weight", [D, D]),
                                          w.take(p + "lambda_proj.bias", [D])))
    keep = g.op("Sub", g.const(1.0), lam)
    v_re, v_im = g.op("Mul", keep, u_re), g.op("Mul", keep, u_im)
    dirs = []
    for name in ("theta_forward", "theta_reverse"):
        theta = w.take(p + name, [1, 1, D]).reshape(D).astype(np.float64)
        dirs.append([g.op("Mul", lam, g.const(np.cos(theta))), g.op("Mul", lam, g.const(np.sin(theta))),
                     v_re, v_im])
    h_re, h_im = og.recurrence(g, "complex", [D], [D], dirs[0], dirs[1], layout, False)
    f = g.op("Concat", h_re, h_im, axis=-1)
    f = g.op("LayerNormalization", f, g.const(w.take(p + "norm.weight", [2 * D])),
             g.const(w.take(p + "norm.bias", [2 * D])), axis=-1, epsilon=LN_EPS)
    gate = g.silu(g.linear(x, w.take(p + "gate.weight", [2 * D, D]), w.take(p + "gate.bias", [2 * D])))
    return g.linear(g.op("Mul", f, gate), w.take(p + "out_proj.weight", [D, 2 * D]),
                    w.take(p + "out_proj.bias", [D]))


def mixer_hgru2(g, w, np, og, cfg, p, x, beta, layout):
    D, e = cfg.dim, cfg.head_size
    if e < 1 or D % e:
        raise Failed(f"model.dim = {D} is not a multiple of model.head_size = {e}")
    H = D // e
    win, bin_ = w.take(p + "in_proj.weight", [3 * D, D]), w.take(p + "in_proj.bias", [3 * D])
    part = lambda i: g.linear(x, win[i * D:(i + 1) * D], bin_[i * D:(i + 1) * D])   # noqa: E731  [v | q | f]
    v, q = g.silu(part(0)), g.op("Sigmoid", part(1))
    lam = lower_bounded(g, beta, part(2))
    k = g.op("Sub", g.const(1.0), lam)
    heads = [g.reshape(t, [-1, cfg.tokens, H, e]) for t in (lam, k, v, q)]
    (o,) = og.recurrence(g, "outer", [H, e, e], [H, e], heads, heads, layout, False)
    o = g.reshape(o, [-1, cfg.tokens, D])
    o = g.op("LayerNormalization", o, g.const(w.take(p + "norm.weight", [D])),
             g.const(w.take(p + "norm.bias", [D])), axis=-1, epsilon=LN_EPS)
    return g.linear(o, w.take(p + "out_proj.weight", [D, D]), w.take(p + "out_proj.bias", [D]))


def mixer_lru(g, w, np, og, cfg, p, u, beta, layout):
    D, S = cfg.dim, cfg.rnn_dim or cfg.dim
    nu = w.take(p + "nu_log", [S]).astype(np.float64)
    theta = w.take(p + "theta", [S]).astype(np.float64)
    B = w.take(p + "B", [2 * S, D]).astype(np.float64)
    C = w.take(p + "C", [D, 2 * S])
    modulus = np.exp(-np.exp(nu))
    gamma = np.sqrt(-np.expm1(-2 * np.exp(nu)))[:, None]     # sqrt(1 - |lambda|^2), exact near 1
    x_re, x_im = g.linear(u, gamma * B[0::2]), g.linear(u, gamma * B[1::2])
    shape = g.op("Shape", x_re)
    a_re = g.op("Expand", g.const(modulus * np.cos(theta)), shape)
    a_im = g.op("Expand", g.const(modulus * np.sin(theta)), shape)
    ins = [a_re, a_im, x_re, x_im]
    h_re, h_im = og.recurrence(g, "complex", [S], [S], ins, ins, layout, cfg.causal)
    # Re(C h) with C's columns (Re C_k, -Im C_k): h_re C[:, 0::2]^T + h_im C[:, 1::2]^T
    y = g.op("Add", g.linear(h_re, C[:, 0::2]), g.linear(h_im, C[:, 1::2]))
    return g.op("Add", y, g.op("Mul", u, g.const(w.take(p + "D", [D]))))


def mixer_min_rnn(g, w, np, og, cfg, p, x, beta, layout):
    D, E = cfg.dim, cfg.rnn_dim or cfg.dim
    parts = 2 if cfg.mixer == "mingru" else 3
    win, bin_ = w.take(p + "in_proj.weight", [parts * E, D]), w.take(p + "in_proj.bias", [parts * E])
    pre = [g.linear(x, win[i * E:(i + 1) * E], bin_[i * E:(i + 1) * E]) for i in range(parts)]
    if parts == 2:   # minGRU [z | h~]: a = 1 - sigmoid(z) = sigmoid(-z), x = sigmoid(z) h~
        z, h_tilde = pre
        a, xin = g.op("Sigmoid", g.op("Neg", z)), g.op("Mul", g.op("Sigmoid", z), h_tilde)
    else:            # minLSTM [f | i | h~]: f' = f / (f + i) = sigmoid(softplus(-i) - softplus(-f)), i' = 1 - f'
        f, i, h_tilde = pre
        d = g.op("Sub", g.op("Softplus", g.op("Neg", i)), g.op("Softplus", g.op("Neg", f)))
        a, xin = g.op("Sigmoid", d), g.op("Mul", g.op("Sigmoid", g.op("Neg", d)), h_tilde)
    (h,) = og.recurrence(g, "real", [E], [E], [a, xin], [a, xin], layout, cfg.causal)
    return g.linear(h, w.take(p + "out_proj.weight", [D, E]), w.take(p + "out_proj.bias", [D]))


MIXER_GRAPHS = {"hgru1": mixer_hgru1, "hgru2": mixer_hgru2, "lru": mixer_lru, "mingru": mixer_min_rnn,
                "minlstm": mixer_min_rnn}


def build(np, og, cfg, w, input_kind):
    """The backbone (DESIGN.md section 4) on "images" -> "logits"."""
    g = og.Graph()
    C, S, P, D, N = cfg.channels, cfg.image_size, cfg.patch_size, cfg.dim, cfg.tokens
    x = "images"
    if input_kind == "uint8":   # hgrn's patchify_u8: u8 * (1 / (255 std)) - mean / std, factors in fp32
        std, mean = np.asarray(cfg.std, np.float32), np.asarray(cfg.mean, np.float32)
        scale = (np.float32(1.0) / (np.float32(255.0) * std)).reshape(C, 1, 1)
        offset = (mean / std).reshape(C, 1, 1)
        x = g.op("Sub", g.op("Mul", g.op("Cast", x, to=og.TensorProto.FLOAT), g.const(scale)), g.const(offset))
    # patchify: b c (h p1) (w p2) -> b (h w) (p1 p2 c)
    x = g.reshape(x, [-1, C, cfg.side, P, cfg.side, P])
    x = g.reshape(g.transpose(x, [0, 2, 4, 3, 5, 1]), [-1, N, P * P * C])
    x = g.linear(x, w.take("to_patch_embedding.1.weight", [D, P * P * C]),
                 w.take("to_patch_embedding.1.bias", [D]))
    betas = lower_bounds(w, np, cfg) if cfg.mixer in ("hgru1", "hgru2") else None
    layout = og.Layout(N, cfg.side, cfg.scan2d)
    mixer = MIXER_GRAPHS[cfg.mixer]
    for l in range(cfg.depth):
        p = f"layers.{l}."
        h = norm(g, w, np, cfg, p + "token_norm", x, D)
        beta = betas[l] if betas is not None else None
        x = g.op("Add", x, mixer(g, w, np, og, cfg, p + "token_mixer.", h, beta, layout))
        h = norm(g, w, np, cfg, p + "feature_norm", x, D)
        H = cfg.glu_dim
        l1 = g.linear(h, w.take(p + "feature_mixer.l1.weight", [H, D]), w.take(p + "feature_mixer.l1.bias", [H]))
        l2 = g.linear(h, w.take(p + "feature_mixer.l2.weight", [H, D]), w.take(p + "feature_mixer.l2.bias", [H]))
        x = g.op("Add", x, g.linear(g.op("Mul", g.silu(l1), l2), w.take(p + "feature_mixer.l3.weight", [D, H]),
                                    w.take(p + "feature_mixer.l3.bias", [D])))
    if cfg.head_norm == "token":
        x = norm(g, w, np, cfg, "norm", x, D)
    pooled = g.op("Mul", g.op("ReduceSum", x, g.ints([1]), keepdims=0), g.const(1.0 / N))
    if cfg.head_norm == "rms":   # SimpleRMSNorm: x / (||x||_2 / sqrt(d) + 1e-8)
        ss = g.op("ReduceSum", g.op("Mul", pooled, pooled), g.ints([-1]), keepdims=1)
        rms = g.op("Add", g.op("Mul", g.op("Sqrt", ss), g.const(D ** -0.5)), g.const(RMS_EPS))
        pooled = g.op("Div", pooled, rms)
    logits = g.linear(pooled, w.take("head.1.weight", [cfg.num_classes, D]), w.take("head.1.bias", [cfg.num_classes]))
    g.nodes.append(og.helper.make_node("Identity", [logits], ["logits"], name="logits_out"))
    w.check_all_used()
    return g


def export(ckpt, out, opts):
    import numpy as np
    import onnx
    from onnx import checker, helper

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import onnx_graph as og

    newest = onnx.defs.onnx_opset_version()
    if not 17 <= opts["opset"] <= newest:
        raise Refused(f"--opset {opts['opset']}: must be 17 (LayerNormalization) to {newest} "
                      f"(the newest onnx {onnx.__version__} knows)")
    tensors, meta = read_safetensors(ckpt, np)
    if "config" not in meta:
        raise Failed(f"{ckpt}: not an hgrn checkpoint (no config in its metadata)")
    cfg = Model(meta["config"])
    g = build(np, og, cfg, Weights(tensors, ckpt), opts["input"])
    elem = onnx.TensorProto.UINT8 if opts["input"] == "uint8" else onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        g.nodes, f"hgrn_{cfg.mixer}",
        [helper.make_tensor_value_info("images", elem, ["batch", cfg.channels, cfg.image_size, cfg.image_size])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", cfg.num_classes])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opts["opset"])],
                              producer_name="hgrn", producer_version=meta.get("hgrn_version", ""))
    # the oldest IR version that has the opset, which every runtime that knows the opset reads
    # (make_model takes the newest the installed onnx has)
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    meta_out = {"classes": meta.get("classes", ""), "hgrn_config": meta["config"], "input": opts["input"],
                "step": meta.get("step", "")}
    helper.set_model_props(model, meta_out)
    model.doc_string = (f"hgrn {cfg.mixer}: images {'uint8' if elem == onnx.TensorProto.UINT8 else 'float32'} "
                        f"[batch, {cfg.channels}, {cfg.image_size}, {cfg.image_size}] -> logits [batch, "
                        f"{cfg.num_classes}]")
    try:
        checker.check_model(model, full_check=True)
    except Exception as e:   # checker.ValidationError, shape inference errors
        raise Failed(f"the ONNX checker refuses the graph: {str(e).splitlines()[0]}") from None
    tmp = f"{out}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(model.SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
        d = os.open(os.path.dirname(os.path.abspath(out)), os.O_RDONLY)   # the rename itself made durable
        try:
            os.fsync(d)
        finally:
            os.close(d)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise Failed(f"{out}: cannot write ({e.strerror})") from None
    scans = sum(1 for n in g.nodes if n.op_type == "Scan")
    print(f"wrote {out}: {cfg.mixer}, {cfg.depth} layers, {opts['input']} images [batch, {cfg.channels}, "
          f"{cfg.image_size}, {cfg.image_size}] -> logits [batch, {cfg.num_classes}], opset {opts['opset']}, "
          f"{len(g.nodes)} nodes ({scans} Scan)")


def other_python(argv):
    """Run this script with another python3 (the one on the PATH, then
    Debian's /usr/bin/python3) when this one lacks onnx: `hgrn export`
    takes /usr/bin/python3 first, and onnx may live in another (a virtual
    environment). Each candidate is tried once (the environment lists the
    ones tried), so this ends."""
    import shutil
    tried = [t for t in os.environ.get("HGRN_EXPORT_TRIED", "").split(os.pathsep) if t]
    here = os.path.realpath(sys.executable or "")
    for cand in (shutil.which("python3"), "/usr/bin/python3"):
        if not cand or cand in tried or not os.access(cand, os.X_OK) or os.path.realpath(cand) == here:
            continue
        os.environ["HGRN_EXPORT_TRIED"] = os.pathsep.join(tried + [cand])
        sys.stdout.flush()
        try:
            os.execv(cand, [cand, os.path.abspath(__file__)] + argv)
        except OSError:
            tried.append(cand)


def main(argv):
    if any(a in ("--help", "-h") for a in argv):
        print(__doc__.split("\n\n", 1)[1] if "\n\n" in __doc__ else __doc__)
        return 0
    try:
        ckpt, out, opts = parse_args(argv)
        if not os.path.isfile(ckpt):
            raise Refused(f"{ckpt}: no such file" if not os.path.exists(ckpt) else f"{ckpt}: not a file")
        reason = check_output(out, "the .onnx file")
        if reason:
            raise Refused(reason)
        try:
            import numpy  # noqa: F401
            import onnx  # noqa: F401
        except ImportError as e:
            other_python(argv)   # returns only when there is none to try
            raise Failed(f"needs onnx and numpy ({e}; Debian: apt-get install python3-onnx, "
                         f"run with /usr/bin/python3)") from None
        export(ckpt, out, opts)
    except Refused as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except Failed as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
