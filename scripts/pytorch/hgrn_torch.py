"""hgrn_torch.py - hgrn's vision models in plain PyTorch, written from the
math in docs/DESIGN.md section 4: the DeiT-style backbone with every token
mixer hgrn has. HGRN1 and HGRN2 carry the official module names
(OpenNLPLab's Hgrn1dVit with BiHgru1d, and the BiHgru2_1d token mixer), so
that a state dict of this model, one of the official code and an hgrn
checkpoint hold the same tensors under the same names. LRU, minGRU and
minLSTM have no official vision code; their tensors are hgrn's, in hgrn's
layout (LRU's complex B and C as interleaved real pairs, see Lru), and they
run bidirectionally or, with model.causal = 1, forward only.

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
import os
import struct
import sys
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

# scripts/ckpt_format.py reads the files as export_onnx.py does
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ckpt_format  # noqa: E402


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
    rnn_dim: int = 0               # lru: complex states; mingru / minlstm: hidden width (0 = dim)
    causal: int = 0                # 1: the scan mixers run forward only
    lru_r_min: float = 0.9         # lru initialisation: |lambda| on the ring [r_min, r_max],
    lru_r_max: float = 0.999       # arg lambda in [0, max_phase]
    lru_max_phase: float = 0.31415927
    mean: list = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list = field(default_factory=lambda: [0.229, 0.224, 0.225])


MODEL_KEYS = ("mixer", "image_size", "channels", "patch_size", "dim", "depth", "glu_dim", "num_classes",
              "drop_path", "head_size", "rnn_dim", "causal", "lru_r_min", "lru_r_max", "lru_max_phase")


def parse_config(text):
    """hgrn config text -> {section: {key: value text}} (ckpt_format.parse_config:
    comments dropped, quotes removed, model.arch = hgrn1|hgrn2 read as
    model.mixer = hgru1|hgru2, as the C reader does)."""
    try:
        return ckpt_format.parse_config(text)
    except ckpt_format.ConfigLineError as e:
        raise ValueError(f"{e}: {e.raw!r}") from None


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
    header, meta, base = ckpt_format.safetensors_header(data, path)
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
    supports_causal, uses_lower_bounds = False, True

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.dim)

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
    supports_causal, uses_lower_bounds = False, True

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.dim, cfg.head_size)

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


def scan(a, x, reverse=False):
    """The element-wise linear recurrence along the tokens (axis 1) of x
    [B, N, W]: h_t = a_t h_{t-1} + x_t from h_{-1} = 0, or with reverse
    r_t = a_t r_{t+1} + x_t from r_N = 0. Real or complex; a is [B, N, W] or
    one row [W] shared by every token and image."""
    a = a.expand_as(x)
    n = x.shape[1]
    h = torch.zeros_like(x[:, 0])
    out = [None] * n
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        h = a[:, t] * h + x[:, t]
        out[t] = h
    return torch.stack(out, 1)


def scan_both_ways(a, x, causal):
    """h + r (both include token t), or h alone when causal (token t sees
    tokens 0..t): the state the scan mixers read out."""
    h = scan(a, x)
    return h if causal else h + scan(a, x, reverse=True)


class Lru(nn.Module):
    """LRU (Orvieto et al. 2023; DESIGN.md section 4), S = model.rnn_dim
    complex states, on the normalised input u:
    lambda_k = exp(-exp(nu_k) + i theta_k), gamma_k = sqrt(1 - |lambda_k|^2),
    h_t = lambda h_{t-1} + gamma (B u_t), r_t = lambda r_{t+1} + gamma (B u_t),
    y_t = Re(C (h_t + r_t)) + D u_t   (causal: h_t alone).
    The complex matrices are stored as hgrn stores them: B [2S, d] with rows
    (Re B_k, Im B_k) interleaved, C [d, 2S] with columns (Re C_k, -Im C_k).
    gamma is a function of nu (the paper's code learns it separately). No
    biases, no lower bound."""
    supports_causal, uses_lower_bounds = True, False

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.dim, cfg.rnn_dim or cfg.dim, cfg.causal, cfg.lru_r_min, cfg.lru_r_max, cfg.lru_max_phase)

    def __init__(self, d, states, causal=False, r_min=0.9, r_max=0.999, max_phase=math.pi / 10):
        super().__init__()
        self.causal = bool(causal)
        self.ring = (r_min, r_max, max_phase)
        self.nu_log = nn.Parameter(torch.empty(states))
        self.theta = nn.Parameter(torch.empty(states))
        self.B = nn.Parameter(torch.empty(2 * states, d))
        self.C = nn.Parameter(torch.empty(d, 2 * states))
        self.D = nn.Parameter(torch.empty(d))
        self.reset_parameters()

    def reset_parameters(self):
        """The paper's ring initialisation (hgrn's, in distribution): |lambda|^2
        uniform in [r_min^2, r_max^2], arg lambda uniform in [0, max_phase];
        B and C normal with variance 1/(2d) and 1/S per real component, D
        standard normal."""
        r_min, r_max, max_phase = self.ring
        s, d = self.nu_log.numel(), self.D.numel()
        with torch.no_grad():
            m2 = r_min ** 2 + (r_max ** 2 - r_min ** 2) * torch.rand(s, dtype=torch.float64)
            self.nu_log.copy_(torch.log(-0.5 * torch.log(m2)))
            self.theta.copy_(max_phase * torch.rand(s, dtype=torch.float64))
            nn.init.normal_(self.B, std=(2 * d) ** -0.5)
            nn.init.normal_(self.C, std=s ** -0.5)
            nn.init.normal_(self.D)

    def complex_b(self):
        """B as a complex [S, d] matrix, from its rows (Re B_k, Im B_k)."""
        rows = self.B.reshape(-1, 2, self.B.shape[1])
        return torch.complex(rows[:, 0], rows[:, 1])

    def complex_c(self):
        """C as a complex [d, S] matrix, from its columns (Re C_k, -Im C_k)."""
        cols = self.C.reshape(self.C.shape[0], -1, 2)
        return torch.complex(cols[..., 0], -cols[..., 1])

    def forward(self, u, beta=None):
        modulus = torch.exp(-torch.exp(self.nu_log))
        lam = torch.complex(modulus * torch.cos(self.theta), modulus * torch.sin(self.theta))
        gamma = torch.sqrt(-torch.expm1(-2 * torch.exp(self.nu_log)))   # sqrt(1 - |lambda|^2), exact near 1
        bu = gamma * (u.to(lam.dtype) @ self.complex_b().T)             # [B, N, S] complex
        h = scan_both_ways(lam, bu, self.causal)
        return (h @ self.complex_c().T).real + self.D * u


class MinRnn(nn.Module):
    """What minGRU and minLSTM share (Feng et al. 2024, "Were RNNs All We
    Needed?"; DESIGN.md section 4): in_proj d -> parts * E (E = model.rnn_dim)
    gives the gate and input pre-activations of each token, gates() turns
    them into the recurrence's decay a_t and input x_t, h_t = a_t h_{t-1} +
    x_t runs both ways and is summed (causal: forward only), and out_proj maps
    E back to d. No lower bound."""
    supports_causal, uses_lower_bounds = True, False
    parts = None

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.dim, cfg.rnn_dim or cfg.dim, cfg.causal)

    def __init__(self, d, hidden, causal=False):
        super().__init__()
        self.causal = bool(causal)
        self.in_proj = nn.Linear(d, self.parts * hidden)
        self.out_proj = nn.Linear(hidden, d)

    def forward(self, x, beta=None):
        a, v = self.gates(*self.in_proj(x).chunk(self.parts, dim=-1))
        return self.out_proj(scan_both_ways(a, v, self.causal))


class MinGru(MinRnn):
    """minGRU: in_proj makes [z | h~]; with z = sigmoid(z),
    h_t = (1 - z_t) h_{t-1} + z_t h~_t (h~ without activation)."""
    parts = 2

    @staticmethod
    def gates(z, h_tilde):
        z = torch.sigmoid(z)
        return 1 - z, z * h_tilde


class MinLstm(MinRnn):
    """minLSTM: in_proj makes [f | i | h~]; with f = sigmoid(f), i = sigmoid(i)
    normalised to f' = f / (f + i), i' = i / (f + i) (so f' + i' = 1),
    h_t = f'_t h_{t-1} + i'_t h~_t."""
    parts = 3

    @staticmethod
    def gates(f, i, h_tilde):
        f, i = torch.sigmoid(f), torch.sigmoid(i)
        return f / (f + i), i / (f + i) * h_tilde


MIXERS = {"hgru1": BiHgru1d, "hgru2": BiHgru2_1d, "lru": Lru, "mingru": MinGru, "minlstm": MinLstm}


class Block(nn.Module):
    def __init__(self, cfg, drop_path):
        super().__init__()
        self.token_norm = nn.LayerNorm(cfg.dim)
        self.token_mixer = MIXERS[cfg.mixer].from_config(cfg)
        self.feature_norm = nn.LayerNorm(cfg.dim)
        self.feature_mixer = GLU(cfg.dim, cfg.glu_dim)
        self.drop_path = DropPath(drop_path)

    def forward(self, x, beta):
        x = x + self.drop_path(self.token_mixer(self.token_norm(x), beta))
        return x + self.drop_path(self.feature_mixer(self.feature_norm(x)))


class HgrnVit(nn.Module):
    """The DeiT-style backbone (DESIGN.md section 4): patchify, Linear, depth
    blocks, mean over tokens, SimpleRMSNorm, Linear head; for the mixers
    that take them (HGRU1, HGRU2) the lower bounds
    beta_l = sum_{i<l} softmax(lower_bounds)_i over the layer axis. Takes
    uint8 images [B, C, H, W] (normalised here as hgrn's patchify_u8 does) or
    float images already normalised."""

    def __init__(self, cfg):
        super().__init__()
        if cfg.mixer not in MIXERS:
            raise ValueError(f"model.mixer = {cfg.mixer}: no PyTorch implementation here "
                             f"(have: {', '.join(MIXERS)})")
        mixer = MIXERS[cfg.mixer]
        if cfg.causal and not mixer.supports_causal:
            raise ValueError(f"model.causal = 1: the {cfg.mixer} mixer is bidirectional only (mixers with a "
                             f"causal mode: {', '.join(k for k, m in MIXERS.items() if m.supports_causal)})")
        if cfg.image_size % cfg.patch_size:
            raise ValueError(f"model.image_size {cfg.image_size} is not a multiple of model.patch_size "
                             f"{cfg.patch_size}")
        self.cfg = cfg
        p = cfg.patch_size
        self.to_patch_embedding = nn.Sequential(Patchify(p), nn.Linear(p * p * cfg.channels, cfg.dim))
        rates = [cfg.drop_path * i / (cfg.depth - 1) if cfg.depth > 1 else cfg.drop_path for i in range(cfg.depth)]
        self.layers = nn.ModuleList([Block(cfg, r) for r in rates])
        self.head = nn.Sequential(SimpleRMSNorm(cfg.dim), nn.Linear(cfg.dim, cfg.num_classes))
        if mixer.uses_lower_bounds:
            self.lower_bounds = nn.Parameter(torch.ones(cfg.depth, cfg.dim))
        else:
            self.register_parameter("lower_bounds", None)
        self.register_buffer("mean", torch.tensor(cfg.mean[:cfg.channels], dtype=torch.float32), persistent=False)
        self.register_buffer("std", torch.tensor(cfg.std[:cfg.channels], dtype=torch.float32), persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        """timm's DeiT initialisation: Linear weights normal(0, 0.02) (timm's
        truncation at +-2 is 100 sigma), biases 0, LayerNorm 1 / 0, lower
        bounds 1, HGRU1's theta 10000^(-2j/d), LRU's ring."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, Lru):
                m.reset_parameters()
        if self.lower_bounds is not None:
            nn.init.ones_(self.lower_bounds)

    def normalise(self, images):
        if images.dtype != torch.uint8:
            return images
        dt = self.to_patch_embedding[1].weight.dtype
        # hgrn's patchify_u8: u8 * (1 / (255 std)) - mean / std, the factors rounded to fp32 first
        scale = (1.0 / (255.0 * self.std)).to(dt)
        offset = (self.mean / self.std).to(dt)
        return images.to(dt) * scale[:, None, None] - offset[:, None, None]

    def forward(self, images):
        x = self.to_patch_embedding(self.normalise(images))
        if self.lower_bounds is None:
            for block in self.layers:
                x = block(x, None)
        else:
            p = torch.softmax(self.lower_bounds, dim=0)
            beta = torch.zeros_like(p[0])
            for i, block in enumerate(self.layers):
                x = block(x, beta)
                beta = beta + p[i]
        return self.head(x.mean(dim=1))


def soft_cross_entropy(logits, targets):
    """Mean over the batch of -sum_k t_k log softmax(logits)_k (hgrn's xent)."""
    return -(targets * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
