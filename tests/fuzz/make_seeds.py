#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/fuzz_*.c) into
tests/fuzz/<target>/: small valid inputs of each kind and a few malformed
ones. Run from anywhere; files are rewritten, crash inputs kept beside them
(named crash-*) are left alone."""
import gzip, json, os, struct

root = os.path.dirname(os.path.abspath(__file__))
src = os.path.dirname(os.path.dirname(root))


def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, meta=None):
    header, blobs, off = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


# ---- safetensors ----
f32 = lambda *v: struct.pack("<%df" % len(v), *v)
put("safetensors", "weights.safetensors", safetensors(
    [("head.1.weight", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6)), ("head.1.bias", "F32", [2], f32(0.5, -1))],
    {"format": "hgrn-ckpt-1", "step": "12", "pair": "0123456789abcdef01234567", "classes": "a\nb\n",
     "config": "[model]\ndim = 8\n"}))
put("safetensors", "state.safetensors", safetensors(
    [("exp_avg.w", "F32", [2], f32(0, 1)), ("exp_avg_sq.w", "F32", [2], f32(0, 1)),
     ("step", "I64", [1], struct.pack("<q", 5)), ("epoch", "I64", [1], struct.pack("<q", 0)),
     ("batch", "I64", [1], struct.pack("<q", 5)), ("best_top1", "F32", [1], f32(-1)),
     ("seed", "U64", [1], struct.pack("<Q", 0)), ("log_loss_sum", "F64", [1], struct.pack("<d", 2.5)),
     ("log_steps", "I64", [1], struct.pack("<q", 2))], {"format": "hgrn-ckpt-1", "step": "5"}))
put("safetensors", "dtypes.safetensors", safetensors(
    [(d, d, [2], b"\x01" * (2 * s)) for d, s in [("F64", 8), ("F16", 2), ("BF16", 2), ("I32", 4), ("I16", 2),
                                                  ("I8", 1), ("U8", 1), ("U16", 2), ("U32", 4), ("BOOL", 1),
                                                  ("F8_E4M3", 1), ("F8_E5M2", 1)]]))
put("safetensors", "scalar_and_empty.safetensors", safetensors(
    [("s", "F32", [], f32(3)), ("z", "F32", [0, 4], b""), ("u\u00e9\u4e2d", "U8", [1, 1, 1, 1, 1, 1, 1, 1], b"x")]))
put("safetensors", "empty_header.safetensors", struct.pack("<Q", 8) + b"{}      ")
put("safetensors", "escapes.safetensors", struct.pack("<Q", 64) +
    b'{"__metadata__":{"k\\u00e9\\ud83d\\ude00":"v\\n\\t\\"\\\\"}}'.ljust(64))
good = safetensors([("a", "F32", [4], f32(1, 2, 3, 4))])
put("safetensors", "truncated.safetensors", good[:-3])
put("safetensors", "huge_header_len.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
put("safetensors", "overlap.safetensors", struct.pack("<Q", 96) +
    b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}'
    .ljust(96) + b"xyz")
put("safetensors", "duplicate.safetensors", struct.pack("<Q", 104) +
    b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'
    .ljust(104) + b"xy")

# ---- config ----
for n in ("fmnist_hgrn1_tiny.cfg", "hgrn2_deit_tiny.cfg"):
    with open(os.path.join(src, "configs", n), "rb") as f:
        put("config", n, f.read())
put("config", "quoted.cfg", '[data]\nauto_augment = "rand-m9\\"x\\\\y"  # c\nmean = 0.5, 0.25,1e-3\n'
    '[train]\nckpt_every = 30m\nseed = 18446744073709551615\n')
put("config", "override.txt", "train.ckpt_every=500")
put("config", "legacy.cfg", "\xef\xbb\xbf[model]\narch = hgrn2\r\n; comment\n[train]\nlr = 1e-40\n")
put("config", "bad.cfg", "[model]\ndim = 12abc\n[nope]\nx\n")
put("config", "twice.cfg", "[train]\nlr = 1\nlr = 2\n")

# ---- IDX: 4-byte little-endian split, images file, labels file ----
def idx_images(n, r, c):
    return struct.pack(">IIII", 0x803, n, r, c) + bytes((i * 7) % 256 for i in range(n * r * c))
def idx_labels(n):
    return struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))
for name, im, lb in [("plain", idx_images(3, 4, 5), idx_labels(3)),
                     ("gzip", gzip.compress(idx_images(2, 3, 3)), gzip.compress(idx_labels(2))),
                     ("badlabel", idx_images(1, 1, 1), struct.pack(">II", 0x801, 1) + b"\x0b"),
                     ("huge", struct.pack(">IIII", 0x803, 0x7fffffff, 4096, 4096), idx_labels(1)),
                     ("trailing", idx_images(1, 2, 2) + b"!", idx_labels(1)),
                     ("truncgz", gzip.compress(idx_images(2, 2, 2))[:-6], idx_labels(2))]:
    put("idx", name + ".bin", struct.pack("<I", len(im)) + im + lb)

# ---- CIFAR: 1 selector byte (records 1..4, bit 2 = gray), then records ----
rec = lambda lab: bytes([lab]) + bytes((i * 13) % 256 for i in range(3072))
put("cifar", "two_rgb.bin", bytes([1]) + rec(3) + rec(9))
put("cifar", "one_gray.bin", bytes([4]) + rec(0))
put("cifar", "short.bin", bytes([0]) + rec(1)[:1000])
put("cifar", "badlabel.bin", bytes([0]) + rec(10))

# ---- class names ----
with open(os.path.join(src, "configs", "fmnist_classes.txt"), "rb") as f:
    put("class_names", "fmnist_classes.txt", f.read())
put("class_names", "crlf_blank.txt", "\xef\xbb\xbfcat\r\n\r\n  \ndog  \t\nn01440764 tench, Tinca tinca\n")
put("class_names", "utf8.txt", "caf\u00e9\n\u732b\n")
put("class_names", "bad_utf8.txt", b"ok\n\xff\xfe\n")
put("class_names", "control.txt", b"a\x01b\n")
put("class_names", "long.txt", "x" * 1100 + "\n")
put("class_names", "empty.txt", "")
