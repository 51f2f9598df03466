#!/usr/bin/env python3
"""onnx_export_check.py - the checks of tests/test_onnx_export.sh.

  perturb IN.safetensors OUT.safetensors SEED [rgb | SWAP_A SWAP_B]
      every tensor of an hgrn checkpoint replaced by random values at scales
      that keep activations of order one (norm weights near 1, LRU's
      |lambda| in [0.5, 0.99], HGRU1's rotations in [0, 3), batch norm's
      running variances in [0.5, 1.5]), the metadata kept; with rgb the
      model takes 3 channels (the stored config's model.channels, data.mean
      and data.std, and the patch embedding's shape changed: the weights
      are random anyway); with SWAP_A SWAP_B those two tensors exchanged (a
      wrong model for the self-test)
  check MODEL.onnx SCANS
      onnx.checker.check_model(full_check=True), exactly SCANS Scan nodes
      (one per direction, layer and scan order: the recurrences are loops,
      not unrolled), the uint8 or float input and the logits output
  runtime
      prints the runtime parity runs on (onnxruntime, else onnx's
      ReferenceEvaluator); exit 77 when there is none
  parity HGRN CKPT MODEL.onnx NAME [--float] [--expect-differ]
       4 random uint8 images through `hgrn forward` (CPU) and through the
      ONNX graph (with --float: normalised here as hgrn does it); prints
      max |onnx - hgrn| / max |hgrn| over the logits and fails above 1e-4
      (--expect-differ: fails unless above 1e-3)."""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

TOL = 1e-4


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        dt = {"F32": "<f4", "U8": "u1", "I64": "<i8"}[h["dtype"]]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dt).reshape(h["shape"]).copy()
    return out, meta


def write_st(path, tensors, meta=None):
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, t in tensors.items():
        raw = np.ascontiguousarray(t).tobytes()
        dt = {np.dtype("float32"): "F32", np.dtype("uint8"): "U8", np.dtype("int64"): "I64"}[t.dtype]
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_rgb(tensors, meta):
    lines = []
    for line in meta["config"].splitlines():
        key = line.split("=", 1)[0].strip()
        if key == "channels":
            line = "channels = 3"
        elif key == "mean":
            line = "mean = 0.485,0.456,0.406"
        elif key == "std":
            line = "std = 0.229,0.224,0.225"
        lines.append(line)
    meta["config"] = "\n".join(lines) + "\n"
    w = tensors["to_patch_embedding.1.weight"]
    tensors["to_patch_embedding.1.weight"] = np.zeros((w.shape[0], w.shape[1] * 3), np.float32)


def perturb(src, dst, seed, extra=None):
    tensors, meta = read_st(src)
    rng = np.random.default_rng(int(seed))
    if extra == ["rgb"]:
        make_rgb(tensors, meta)
    out = {}
    for name, t in tensors.items():
        shape = t.shape
        if name.endswith(("theta_forward", "theta_reverse")) or name.endswith(".theta"):
            v = rng.uniform(0, 3, shape)
        elif name.endswith(".nu_log"):   # |lambda| = exp(-exp(nu)) in [0.5, 0.99]
            v = np.log(-np.log(rng.uniform(0.5, 0.99, shape)))
        elif name.endswith(".running_var"):
            v = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(".running_mean"):
            v = 0.3 * rng.standard_normal(shape)
        elif name == "lower_bounds":
            v = rng.standard_normal(shape)
        elif len(shape) == 2:
            v = rng.standard_normal(shape) / np.sqrt(shape[1])
        elif "norm" in name and name.endswith("weight"):
            v = 1 + 0.2 * rng.standard_normal(shape)
        else:
            v = 0.2 * rng.standard_normal(shape)
        out[name] = v.astype(np.float32)
    if extra and len(extra) == 2:
        a, b = extra
        out[a], out[b] = out[b], out[a]
    write_st(dst, out, meta)


def check(path, scans):
    import onnx
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    n = sum(1 for node in model.graph.node if node.op_type == "Scan")
    if n != int(scans):
        raise SystemExit(f"{path}: {n} Scan nodes, expected {scans}")
    ins, outs = model.graph.input, model.graph.output
    if [i.name for i in ins] != ["images"] or [o.name for o in outs] != ["logits"]:
        raise SystemExit(f"{path}: inputs {[i.name for i in ins]}, outputs {[o.name for o in outs]}")
    print(f"{os.path.basename(path)}: checker ok, {len(model.graph.node)} nodes, {n} Scan, opset "
          f"{model.opset_import[0].version}")


def runtime():
    """(name, run(model_path, images) -> logits) or None"""
    try:
        import onnxruntime as ort

        def run(path, images):
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            return sess.run(None, {"images": images})[0]
        return f"onnxruntime {ort.__version__}", run
    except ImportError:
        pass
    try:
        import onnx
        from onnx.reference import ReferenceEvaluator

        def run(path, images):
            return ReferenceEvaluator(onnx.load(path)).run(None, {"images": images})[0]
        return f"onnx {onnx.__version__} ReferenceEvaluator", run
    except ImportError:
        return None


def parity(hgrn, ckpt, model_path, name, float_input=False, expect_differ=False):
    import onnx
    rt = runtime()
    if rt is None:
        print("no onnxruntime and no onnx.reference: parity skipped")
        return 77
    model = onnx.load(model_path)
    want = onnx.TensorProto.FLOAT if float_input else onnx.TensorProto.UINT8
    if model.graph.input[0].type.tensor_type.elem_type != want:
        print(f"FAIL {name}: the graph's images are not {'float' if float_input else 'uint8'}")
        return 1
    c, s = (d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:3])
    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, size=(4, c, s, s), dtype=np.uint8)
    with tempfile.TemporaryDirectory() as tmp:
        write_st(f"{tmp}/in.safetensors", {"images": images})
        r = subprocess.run([hgrn, "forward", "--ckpt", ckpt, "--inputs", f"{tmp}/in.safetensors", "--out",
                            f"{tmp}/out.safetensors", "--device", "cpu"], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL {name}: hgrn forward: {r.stderr.strip()}")
            return 1
        ref = read_st(f"{tmp}/out.safetensors")[0]["logits"]
    feed = images
    if float_input:   # hgrn's normalisation: u8 * (1 / (255 std)) - mean / std, the factors in fp32
        props = {p.key: p.value for p in model.metadata_props}
        data = {}
        for line in props["hgrn_config"].splitlines():
            if "=" in line:
                k, v = (x.strip() for x in line.split("=", 1))
                data[k] = v.strip('"')
        mean = np.array([float(x) for x in data["mean"].split(",")][:c], np.float32)
        std = np.array([float(x) for x in data["std"].split(",")][:c], np.float32)
        scale = np.float32(1) / (np.float32(255) * std)
        feed = (images.astype(np.float32) * scale[:, None, None] - (mean / std)[:, None, None]).astype(np.float32)
    got = rt[1](model_path, feed)
    if got.shape != ref.shape:
        print(f"FAIL {name}: logits {got.shape}, hgrn forward {ref.shape}")
        return 1
    rel = float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())
    if expect_differ:
        ok = rel > 1e-3
        print(f"{'ok  ' if ok else 'FAIL'} {name}: a wrong model is told apart: max relative error {rel:.3e} "
              f"({rt[0]})")
    else:
        ok = rel <= TOL
        print(f"{'ok  ' if ok else 'FAIL'} {name}: max relative error on logits {rel:.3e} (limit {TOL:g}; "
              f"{rt[0]}; hgrn forward on the CPU)")
    return 0 if ok else 1


def main(argv):
    cmd = argv[0]
    if cmd == "perturb":
        perturb(argv[1], argv[2], argv[3], argv[4:] or None)
        return 0
    if cmd == "check":
        check(argv[1], argv[2])
        return 0
    if cmd == "runtime":
        rt = runtime()
        print(rt[0] if rt else "none")
        return 0 if rt else 77
    if cmd == "parity":
        return parity(argv[1], argv[2], argv[3], argv[4], "--float" in argv, "--expect-differ" in argv)
    raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
