"""hgrn_torch.py - the HGRN1 and HGRN2 vision models in plain PyTorch, written
from the math in docs/DESIGN.md section 4 with the official module names
(OpenNLPLab's Hgrn1dVit with BiHgru1d, and the BiHgru2_1d token mixer), so
that a state dict of this model, one of the official code and an hgrn
checkpoint hold the same tensors under the same names.

Also here: safetensors reading and writing (no dependency beyond torch), and
the hgrn config format (`key = value` under [model], [train], [data]).

The recurrences run as plain loops over the tokens: this is the reference
for parity checks and for moving weights between the implementations, not a
fast trainer. Everything runs in the dtype of the parameters (float32, or
float64 after .double()).

    model = HgrnVit(ModelConfig(mixer="hgru1", dim=192, depth=12, glu_dim=384))
    probs = model(images_uint8).softmax(-1)
"""
import json
import math
import struct
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------- config

@dataclass
class ModelConfig:
    """The [model] section of an hgrn config, and the input normalisation."""
    mixer: str = "hgru1"
    image_size: int = 224
    channels: int = 3
    patch_size: int = 14
    dim: int = 192
    depth: int = 12
    glu_dim: int = 384
    num_classes: int = 1000
    drop_path: float = 0.1
    head_size: int = 16
    mean: list = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list = field(default_factory=lambda: [0.229, 0.224, 0.225])


MODEL_KEYS = ("mixer", "image_size", "channels", "patch_size", "dim", "depth", "glu_dim", "num_classes",
              "drop_path", "head_size")


def parse_config(text):
    """hgrn config text -> {section: {key: value text}} (comments dropped,
    quotes removed). The legacy key model.arch = hgrn1|hgrn2 becomes
    model.mixer = hgru1|hgru2, as the C reader does."""
    out, section = {}, None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line[1:line.index("]")].strip()
            out.setdefault(section, {})
            continue
        if "=" not in line or section is None:
            raise ValueError(f"config line {n}: expected 'key = value' under a [section]: {raw!r}")
        key, value = (s.strip() for s in line.split("=", 1))
        if value.startswith('"'):
            end = value.index('"', 1)
            value = value[1:end]
        else:
            for i, ch in enumerate(value):
                if ch in "#;" and (i == 0 or value[i - 1] in " \t"):
                    value = value[:i].strip()
                    break
        if section == "model" and key == "arch":
            key, value = "mixer", {"hgrn1": "hgru1", "hgrn2": "hgru2"}[value]
        out[section][key] = value
    return out


def _is_number_list(v):
    try:
        for item in v.split(","):
            float(item)
        return bool(v.strip())
    except ValueError:
        return False


def write_config(sections):
    """{section: {key: value}} -> config text (numbers bare, strings quoted)."""
    lines = []
    for sec in ("model", "train", "data"):
        if sec not in sections:
            continue
        lines.append(f"[{sec}]")
        for k, v in sections[sec].items():
            v = str(v)
            if _is_number_list(v):
                lines.append(f"{k} = {v}")
            else:
                lines.append(f'{k} = "' + v.replace("\\", "\\\\").replace('"', '\\"') + '"')
        lines.append("")
    return "\n".join(lines)


def model_config_from_text(text):
    """The ModelConfig of a config text (keys not given keep the defaults)."""
    sec = parse_config(text)
    m, d = sec.get("model", {}), sec.get("data", {})
    cfg = ModelConfig()
    for k in MODEL_KEYS:
        if k in m:
            setattr(cfg, k, type(getattr(cfg, k))(m[k]))
    if "mean" in d:
        cfg.mean = [float(x) for x in d["mean"].split(",")]
    if "std" in d:
        cfg.std = [float(x) for x in d["std"].split(",")]
    return cfg


# ---------------------------------------------------------------- safetensors

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def load_safetensors(path):
    """-> ({name: tensor}, {metadata key: value})."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: not a safetensors file (its header length {n} runs past the end of the file)")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        raise ValueError(f"{path}: not a safetensors file (the header is not JSON)") from None
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    tensors = {}
    for name, h in header.items():
        dt = _DTYPES.get(h["dtype"])
        if dt is None:
            raise ValueError(f"{path}: tensor {name}: dtype {h['dtype']} is not supported here")
        a, b = h["data_offsets"]
        raw = bytearray(data[base + a:base + b])
        t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        tensors[name] = t.reshape(h["shape"]).clone()
    return tensors, meta


def save_safetensors(path, tensors, metadata=None):
    """Write {name: tensor} (contiguous little-endian, in the dict's order)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        raw = t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------- layers

class SimpleRMSNorm(nn.Module):
    """x / (||x||_2 / sqrt(d) + 1e-8), no weights (the head's norm)."""

    def __init__(self, dim, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x):
        return x / (x.norm(2, dim=-1, keepdim=True) * self.dim ** -0.5 + self.eps)


class GLU(nn.Module):
    """(SiLU(x l1) * (x l2)) l3: feature_mixer.l1 / l2 / l3."""

    def __init__(self, d, h):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(d, h), nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.l3(F.silu(self.l1(x)) * self.l2(x))


class Patchify(nn.Module):
    """b c (h p1) (w p2) -> b (h w) (p1 p2 c), einops' Rearrange of the official model."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        b, c, hh, ww = x.shape
        p = self.p
        x = x.reshape(b, c, hh // p, p, ww // p, p).permute(0, 2, 4, 3, 5, 1)
        return x.reshape(b, (hh // p) * (ww // p), p * p * c)


class DropPath(nn.Module):
    """Per-sample drop path (timm's), active in training mode only."""

    def __init__(self, rate):
        super().__init__()
        self.rate = rate

    def forward(self, x):
        if not self.training or self.rate <= 0:
            return x
        keep = 1 - self.rate
        mask = x.new_empty(x.shape[0], *([1] * (x.dim() - 1))).bernoulli_(keep)
        return x * mask / keep


class BiHgru1d(nn.Module):
    """HGRU1 (DESIGN.md section 4): per channel j, with the input pairs c_t,
    lambda_t = beta + (1 - beta) sigmoid(lambda_proj(x)) and a rotation theta,
    h_t = lambda_t e^{i theta_f} h_{t-1} + (1 - lambda_t) c_t forward,
    r_t = lambda_t e^{i theta_r} r_{t+1} + (1 - lambda_t) c_t reverse,
    y = out_proj(LayerNorm_2d([Re(h + r) | Im(h + r)]) * SiLU(gate(x)))."""

    def __init__(self, d):
        super().__init__()
        self.input_proj = nn.Linear(d, 2 * d)
        self.lambda_proj = nn.Linear(d, d)
        theta = 10000 ** (-2 / d * torch.arange(d, dtype=torch.float64))
        self.theta_forward = nn.Parameter(theta.float().reshape(1, 1, d).clone())
        self.theta_reverse = nn.Parameter(theta.float().reshape(1, 1, d).clone())
        self.gate = nn.Linear(d, 2 * d)
        self.out_proj = nn.Linear(2 * d, d)
        self.norm = nn.LayerNorm(2 * d)

    @staticmethod
    def _scan(v_re, v_im, a_re, a_im, reverse):
        n = v_re.shape[1]
        h_re = torch.zeros_like(v_re[:, 0])
        h_im = torch.zeros_like(v_im[:, 0])
        out_re, out_im = [None] * n, [None] * n
        for t in (range(n - 1, -1, -1) if reverse else range(n)):
            h_re, h_im = (a_re[:, t] * h_re - a_im[:, t] * h_im + v_re[:, t],
                          a_re[:, t] * h_im + a_im[:, t] * h_re + v_im[:, t])
            out_re[t], out_im[t] = h_re, h_im
        return torch.stack(out_re, 1), torch.stack(out_im, 1)

    def forward(self, x, beta):
        u = F.silu(self.input_proj(x))                     # [B, N, 2D]: (re, im) pairs interleaved
        lam = beta + (1 - beta) * torch.sigmoid(self.lambda_proj(x))
        v_re, v_im = (1 - lam) * u[..., 0::2], (1 - lam) * u[..., 1::2]
        tf, tr = self.theta_forward.reshape(-1), self.theta_reverse.reshape(-1)
        f_re, f_im = self._scan(v_re, v_im, lam * torch.cos(tf), lam * torch.sin(tf), False)
        r_re, r_im = self._scan(v_re, v_im, lam * torch.cos(tr), lam * torch.sin(tr), True)
        feature = torch.cat([f_re + r_re, f_im + r_im], -1)
        return self.out_proj(self.norm(feature) * F.silu(self.gate(x)))


class BiHgru2_1d(nn.Module):
    """HGRU2 (DESIGN.md section 4): [v | q | f] = in_proj(x); v = SiLU(v),
    q = sigmoid(q), lambda = beta + (1 - beta) sigmoid(f), k = 1 - lambda; per
    head of e channels S_t = Diag(lambda_t) S_{t-1} + k_t v_t^T forward, R_t the
    same in reverse (both include token t), o_t = q_t^T (S_t + R_t),
    y = out_proj(LayerNorm_d(o))."""

    def __init__(self, d, head_size):
        super().__init__()
        if d % head_size:
            raise ValueError(f"model.dim = {d} is not a multiple of model.head_size = {head_size}")
        self.e = head_size
        self.in_proj = nn.Linear(d, 3 * d)
        self.norm = nn.LayerNorm(d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x, beta):
        b, n, d = x.shape
        e, h = self.e, d // self.e
        v, q, f = self.in_proj(x).chunk(3, dim=-1)
        v, q = F.silu(v), torch.sigmoid(q)
        lam = beta + (1 - beta) * torch.sigmoid(f)
        k = 1 - lam
        v, q, lam, k = (z.reshape(b, n, h, e) for z in (v, q, lam, k))
        o = [None] * n
        for direction in (range(n), range(n - 1, -1, -1)):
            s = x.new_zeros(b, h, e, e)
            for t in direction:
                s = lam[:, t, :, :, None] * s + k[:, t, :, :, None] * v[:, t, :, None, :]
                ot = torch.einsum("bhi,bhij->bhj", q[:, t], s)
                o[t] = ot if o[t] is None else o[t] + ot
        o = torch.stack(o, 1).reshape(b, n, d)
        return self.out_proj(self.norm(o))


MIXERS = {
    "hgru1": lambda cfg: BiHgru1d(cfg.dim),
    "hgru2": lambda cfg: BiHgru2_1d(cfg.dim, cfg.head_size),
}


class Block(nn.Module):
    def __init__(self, cfg, drop_path):
        super().__init__()
        self.token_norm = nn.LayerNorm(cfg.dim)
        self.token_mixer = MIXERS[cfg.mixer](cfg)
        self.feature_norm = nn.LayerNorm(cfg.dim)
        self.feature_mixer = GLU(cfg.dim, cfg.glu_dim)
        self.drop_path = DropPath(drop_path)

    def forward(self, x, beta):
        x = x + self.drop_path(self.token_mixer(self.token_norm(x), beta))
        return x + self.drop_path(self.feature_mixer(self.feature_norm(x)))


class HgrnVit(nn.Module):
    """The DeiT-style backbone (DESIGN.md section 4): patchify, Linear, depth
    blocks, mean over tokens, SimpleRMSNorm, Linear head; the lower bounds
    beta_l = sum_{i<l} softmax(lower_bounds)_i over the layer axis. Takes
    uint8 images [B, C, H, W] (normalised here as hgrn's patchify_u8 does) or
    float images already normalised."""

    def __init__(self, cfg):
        super().__init__()
        if cfg.mixer not in MIXERS:
            raise ValueError(f"model.mixer = {cfg.mixer}: no PyTorch implementation here "
                             f"(have: {', '.join(MIXERS)})")
        if cfg.image_size % cfg.patch_size:
            raise ValueError(f"model.image_size {cfg.image_size} is not a multiple of model.patch_size "
                             f"{cfg.patch_size}")
        self.cfg = cfg
        p = cfg.patch_size
        self.to_patch_embedding = nn.Sequential(Patchify(p), nn.Linear(p * p * cfg.channels, cfg.dim))
        rates = [cfg.drop_path * i / (cfg.depth - 1) if cfg.depth > 1 else cfg.drop_path for i in range(cfg.depth)]
        self.layers = nn.ModuleList([Block(cfg, r) for r in rates])
        self.head = nn.Sequential(SimpleRMSNorm(cfg.dim), nn.Linear(cfg.dim, cfg.num_classes))
        self.lower_bounds = nn.Parameter(torch.ones(cfg.depth, cfg.dim))
        self.register_buffer("mean", torch.tensor(cfg.mean[:cfg.channels], dtype=torch.float32), persistent=False)
        self.register_buffer("std", torch.tensor(cfg.std[:cfg.channels], dtype=torch.float32), persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        """timm's DeiT initialisation: Linear weights normal(0, 0.02) (timm's
        truncation at +-2 is 100 sigma), biases 0, LayerNorm 1 / 0, lower
        bounds 1, theta 10000^(-2j/d)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.ones_(self.lower_bounds)

    def normalise(self, images):
        if images.dtype != torch.uint8:
            return images
        dt = self.lower_bounds.dtype
        # hgrn's patchify_u8: u8 * (1 / (255 std)) - mean / std, the factors rounded to fp32 first
        scale = (1.0 / (255.0 * self.std)).to(dt)
        offset = (self.mean / self.std).to(dt)
        return images.to(dt) * scale[:, None, None] - offset[:, None, None]

    def forward(self, images):
        x = self.to_patch_embedding(self.normalise(images))
        p = torch.softmax(self.lower_bounds, dim=0)
        beta = torch.zeros_like(p[0])
        for i, block in enumerate(self.layers):
            x = block(x, beta)
            beta = beta + p[i]
        return self.head(x.mean(dim=1))


def soft_cross_entropy(logits, targets):
    """Mean over the batch of -sum_k t_k log softmax(logits)_k (hgrn's xent)."""
    return -(targets * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
