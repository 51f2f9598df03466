"""onnx_graph.py - the ONNX building blocks of scripts/export_onnx.py: a
small graph builder over onnx.helper, and the token mixers' recurrences as
ONNX Scan operators (one loop over the tokens, never unrolled), in the 1-D
row-major order or as the 2-D scan over the rows and the columns of the
token grid (DESIGN.md section 4, "The 2-D scan").

Every op used here keeps its meaning from opset 17 on: axes are inputs
(ReduceSum, Squeeze, Unsqueeze: opset 13), ReduceMean (whose axes became an
input only in opset 18) and Split (which gained num_outputs) are not used,
so one graph is valid for every opset the installed onnx knows from 17 up."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


class Graph:
    """Nodes and initializers of one graph. op() returns the name of the
    op's (first) output; names are unique per builder (prefix)."""

    def __init__(self, prefix=""):
        self.prefix = prefix
        self.nodes, self.inits, self.count = [], [], 0
        self.consts = {}

    def name(self, hint):
        self.count += 1
        return f"{self.prefix}{hint}_{self.count}"

    def op(self, kind, *inputs, outputs=1, hint=None, **attrs):
        outs = [self.name(hint or kind.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(kind, list(inputs), outs, name=self.name("n_" + kind), **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, value, hint="c", dtype=np.float32):
        """An initializer (a Constant node in a subgraph, where initializers
        would be looked up in the outer scope first by some runtimes)."""
        arr = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        key = None
        if arr.size <= 8:   # small shapes and scalars are shared
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            if key in self.consts:
                return self.consts[key]
        name = self.name(hint)
        if self.prefix:
            self.nodes.append(helper.make_node("Constant", [], [name], name=self.name("n_Constant"),
                                               value=numpy_helper.from_array(arr, name)))
        else:
            self.inits.append(numpy_helper.from_array(arr, name))
        if key is not None:
            self.consts[key] = name
        return name

    def ints(self, values):
        return self.const(values, "shape", np.int64)

    # conveniences for the ops the model is made of
    def linear(self, x, weight, bias=None):
        """x [..., in] @ weight[out, in]^T + bias: MatMul with the transposed
        weight stored (Gemm takes 2-D operands only)."""
        y = self.op("MatMul", x, self.const(np.asarray(weight, np.float32).T, "w"))
        return self.op("Add", y, self.const(bias, "b")) if bias is not None else y

    def silu(self, x):
        return self.op("Mul", x, self.op("Sigmoid", x))

    def reshape(self, x, shape):
        return self.op("Reshape", x, self.ints(shape))

    def transpose(self, x, perm):
        return self.op("Transpose", x, perm=list(perm))

    def slice_last(self, x, start, end):
        """x[..., start:end]"""
        return self.op("Slice", x, self.ints([start]), self.ints([end]), self.ints([-1]))

    def flip0(self, x):
        """x[::-1] along axis 0"""
        return self.op("Slice", x, self.ints([-1]), self.ints([np.iinfo(np.int64).min]), self.ints([0]),
                       self.ints([-1]), hint="flip")

    def add_all(self, values):
        out = values[0]
        for v in values[1:]:
            out = self.op("Add", out, v)
        return out

    def zeros_for(self, x, state_shape):
        """zeros [x.shape[1], *state_shape]: the scan's initial state for
        sequences x [L, n, ...] (n follows the batch)"""
        n = self.op("Slice", self.op("Shape", x), self.ints([1]), self.ints([2]))
        shape = self.op("Concat", n, self.ints(list(state_shape)), axis=0)
        return self.op("ConstantOfShape", shape, value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]))


def _value(name):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


# ---------------------------------------------------------------- scan bodies
# A body maps (states..., step inputs...) to (new states..., step outputs...);
# the step inputs are the tokens' slices [sequences, ...]. Each body function
# returns (nodes, state inputs, step inputs, new states, step outputs), its
# names under its own prefix so that none repeats a name outside.

def _body_real(g, p):
    """h_t = a_t h_{t-1} + x_t (element-wise), output h_t"""
    h, a, x = p + "h", p + "a", p + "x"
    hn = g.op("Add", g.op("Mul", a, h), x, hint="h_next")
    return [h], [a, x], [hn], [g.op("Identity", hn, hint="h_out")]


def _body_complex(g, p):
    """h_t = a_t h_{t-1} + x_t over complex numbers held as (re, im) pairs"""
    hr, hi, ar, ai, xr, xi = (p + n for n in ("hr", "hi", "ar", "ai", "xr", "xi"))
    nr = g.op("Add", g.op("Sub", g.op("Mul", ar, hr), g.op("Mul", ai, hi)), xr, hint="hr_next")
    ni = g.op("Add", g.op("Add", g.op("Mul", ar, hi), g.op("Mul", ai, hr)), xi, hint="hi_next")
    return [hr, hi], [ar, ai, xr, xi], [nr, ni], [g.op("Identity", nr, hint="hr_out"),
                                                  g.op("Identity", ni, hint="hi_out")]


def _body_outer(g, p):
    """HGRU2 per head: S_t = Diag(lam_t) S_{t-1} + k_t v_t^T, output
    o_t = q_t^T S_t; state [n, H, e, e], step inputs [n, H, e]"""
    s, lam, k, v, q = (p + n for n in ("s", "lam", "k", "v", "q"))
    last, second = g.ints([-1]), g.ints([-2])
    col = lambda t: g.op("Unsqueeze", t, last)     # noqa: E731  [n, H, e, 1]
    row = lambda t: g.op("Unsqueeze", t, second)   # noqa: E731  [n, H, 1, e]
    sn = g.op("Add", g.op("Mul", col(lam), s), g.op("Mul", col(k), row(v)), hint="s_next")
    return [s], [lam, k, v, q], [sn], [g.op("Squeeze", g.op("MatMul", row(q), sn), second, hint="o")]


BODIES = {"real": _body_real, "complex": _body_complex, "outer": _body_outer}


def scan(g, kind, state_shape, inputs, reverse):
    """One direction of a recurrence over the sequences inputs [L, n, ...]
    (token first): a Scan op with the body `kind` and every axis and
    direction attribute at its default, the one form every runtime
    implements (onnx's reference evaluator runs no other); the reverse
    direction flips the tokens before and after. Returns the step outputs
    [L, n, ...] in token order.

    The body carries as many states as it has step inputs: one-element
    states passed through unchanged make up the difference. onnx's
    ReferenceEvaluator (1.13 to 1.20) takes the first num_scan_inputs body
    inputs as the states and runs no other Scan correctly; other runtimes
    pass the extra states along at no cost."""
    prefix = g.name(kind + ("_rev" if reverse else "_fwd")) + "_"
    b = Graph(prefix)
    st_in, step_in, st_out, step_out = BODIES[kind](b, prefix)
    pads = [prefix + f"pad{i}" for i in range(len(step_in) - len(st_in))]
    pads_out = [b.op("Identity", q, hint="pad_out") for q in pads]
    body = helper.make_graph(b.nodes, prefix + "body", [_value(n) for n in st_in + pads + step_in],
                             [_value(n) for n in st_out + pads_out + step_out])
    if reverse:
        inputs = [g.flip0(x) for x in inputs]
    zero = g.zeros_for(inputs[0], state_shape)
    pad0 = g.const(np.zeros(1), "pad")
    nstates = len(st_in) + len(pads)
    outs = g.op("Scan", *([zero] * len(st_in)), *([pad0] * len(pads)), *inputs, outputs=nstates + len(step_out),
                hint="scan", body=body, num_scan_inputs=len(inputs))[nstates:]
    return [g.flip0(y) for y in outs] if reverse else outs


class Layout:
    """How a mixer's per-token tensors [B, N, *trailing] become sequences
    for the scan, token first [L, n, *trailing], and back: the whole image
    (1-D), or with the 2-D scan the grid's rows and its columns
    (grid2d.h). The tokens of an image are its S x S grid row by row."""

    def __init__(self, tokens, side, scan2d):
        self.tokens, self.side, self.scan2d = tokens, side, scan2d

    def orders(self):
        return ("rows", "cols") if self.scan2d else ("seq",)

    @staticmethod
    def _perm(head, trailing):
        return list(head) + list(range(len(head), len(head) + len(trailing)))

    def to_seqs(self, g, x, trailing, order):
        s, t = self.side, list(trailing)
        if order == "seq":      # [B, N] -> [N, B]
            return g.transpose(x, self._perm([1, 0], t))
        grid = g.reshape(x, [-1, s, s] + t)                     # [B, row, col]
        if order == "rows":     # along a row: [col, B, row] -> [S, B S]
            return g.reshape(g.transpose(grid, self._perm([2, 0, 1], t)), [s, -1] + t)
        return g.reshape(g.transpose(grid, self._perm([1, 0, 2], t)), [s, -1] + t)   # [row, B, col]

    def from_seqs(self, g, y, trailing, order):
        s, t = self.side, list(trailing)
        if order == "seq":
            return g.transpose(y, self._perm([1, 0], t))
        grid = g.reshape(y, [s, -1, s] + t)
        perm = [1, 2, 0] if order == "rows" else [1, 0, 2]
        return g.reshape(g.transpose(grid, self._perm(perm, t)), [-1, self.tokens] + t)


def recurrence(g, kind, state_shape, trailing, forward_inputs, reverse_inputs, layout, causal):
    """The mixer's state read-out, summed over every scan it runs: forward
    (and, unless causal, reverse; both include token t) over the image or
    over the grid's rows and columns. Inputs [B, N, *trailing]; the reverse
    direction takes its own inputs (HGRU1's decay rotates by theta_r).
    Returns the summed step outputs [B, N, *trailing], one per body output."""
    totals = None
    for order in layout.orders():
        seqs = lambda xs: [layout.to_seqs(g, x, trailing, order) for x in xs]   # noqa: E731
        runs = [scan(g, kind, state_shape, seqs(forward_inputs), False)]
        if not causal:
            runs.append(scan(g, kind, state_shape, seqs(reverse_inputs), True))
        summed = [layout.from_seqs(g, g.add_all([r[i] for r in runs]), trailing, order)
                  for i in range(len(runs[0]))]
        totals = summed if totals is None else [g.op("Add", a, b) for a, b in zip(totals, summed)]
    return totals
