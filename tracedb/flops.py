"""FLOPs and bytes of an op, each rule written once with its formula and source.

`annotate_nodes(batch)` fills the `nodes` columns `flops`, `memory_bytes`, `flops_rule`,
`flops_dtype` and `flops_counted` of a batch, from what the row already holds: its
`op_type`, `input_shapes`, `input_dtypes` and the `Concrete Inputs` kept in `params`
(PyTorch's stride, padding, dilation, groups, is_causal). Readers call it on their node
batches (`BatchBuilder.flush`, Kineto's node batches), and migration 0010 on the rows of
runs ingested before, so old and new runs count the same.

Rules (FLOPs: a multiply-add is 2 FLOPs, as PyTorch's `torch.utils.flop_counter`, the
profiler's `with_flops`, MegEngine's footprint and XLA's cost analysis all count):

  rule       ops                                   FLOPs
  matmul     aten::mm, aten::addmm                 2*M*N*K                  A[M,K] @ B[K,N]
             aten::bmm, aten::baddbmm              2*B*M*N*K                A[B,M,K] @ B[B,K,N]
             aten::matmul                          2*batch*M*N*K            broadcast batch dims (1-D: M or N = 1)
             aten::linear                          2*rows*N*K               x[..., K], W[N, K]; rows = prod(x[:-1])
  conv       aten::conv{1,2,3}d, convolution,      2*N*prod(out)*prod(W)    W[Cout, Cin/groups, k...];
             _convolution, cudnn_convolution,                               out = floor((in + 2p - d(k-1) - 1)/s) + 1
             mkldnn_convolution, miopen_conv...   (transposed: prod(in) for prod(out))
             aten::convolution_backward            conv FLOPs * (grad_input + grad_weight in output_mask)
  sdpa       aten::scaled_dot_product_attention    2*B*H*Sq*Sk*(Dqk + Dv)   = 4*B*H*Sq*Sk*D; halved when causal
             and its flash / efficient / cudnn
             forms (forward)
             their *_backward                      2 * the forward          (4 matmuls instead of 2)
  matmul     TF MatMul, BatchMatMul(V2, V3)        2*numel(out)*K           K = a[-2]*a[-1] / M (transpose-proof)
  conv       TF Conv2D, Conv3D                     2*numel(out)*kh*kw*Cin   filter [kh, kw, Cin, Cout] (any data_format)
             TF Conv2DBackpropInput / Filter       2*numel(dy)*kh*kw*Cin    the forward's FLOPs
  matmul     XLA dot (HLO), cuBLAS GEMM calls      2*numel(out)*prod(lhs[c])  c: lhs contracting dims (= 2*M*N*K*batch)
  conv       XLA convolution, cuDNN conv calls     2*numel(out)*prod(W[s])*W[i]  s: kernel spatial dims, i: kernel
                                                                            input feature dim (= Cin/groups)
  reported   the source's own figure: MegEngine's footprint (`computation`, `memory`), the
             PyTorch profiler's `flops` arg (`with_flops=True`), an XSpace op's `flops` /
             `bytes_accessed` stats

A TF node (StepStats / RunMetadata) records only its outputs' shapes: its inputs' shapes
are its producers' outputs, found by name in the same batch (`inputs`, `name:k`).

Sources: PyTorch `torch/utils/flop_counter.py` (mm_flop, bmm_flop, conv_flop_count,
sdpa_flop_count, sdpa_backward_flop_count) and ATen's `native_functions.yaml` for the
argument order; the convolution output size is the formula of `torch.nn.Conv2d`'s docs.

Bytes (`memory_bytes`, where a rule applies and the source gave none): the tensor inputs
the formula reads plus its output, times the element size of the input dtype: the least
traffic the op can have (each operand read once, the result written once).

Nesting (`flops_counted`): PyTorch records an op inside the op that called it
(`aten::linear` > `aten::matmul` > `aten::mm`; autocast's `aten::conv2d` > `aten::conv2d`
> ... > `aten::cudnn_convolution`); each carries its own FLOPs, but a total counts each
once: at the innermost op with FLOPs, which runs in the dtype the kernels use (autocast's
outer op still has fp32 inputs) and is the op its kernels link to. `flops_counted` is
false for a row that encloses (same thread, within its start and end) another row of the
batch with FLOPs, true for the others with FLOPs (untimed ones too). A reader whose ops
never nest (XLA's device ops) sets `flops_counted` and `flops_dtype` itself; they are kept.

An execution trace's ops (rows with `parent_seq`) get their FLOPs too, for the per-op
view, but never count in totals: the Kineto trace of the same program holds the same ops
(joined by `rf_id`) and counts them. A Kineto op recorded without shapes takes its ET
twin's shapes, dtypes and scalar arguments at ingest (`tracedb.etlink`), and its FLOPs
are worked out again with these rules.

XLA (XSpace): each op the device ran is an untimed `nodes` row (device GPU:N; its kernels
point to it by `node_seq`), counted, its FLOPs from the
plane's own `flops` stat where the profiler wrote one, else from the HLO module of
`/host:metadata` (`tracedb.formats.hlo`: dots, convolutions, cuDNN / cuBLAS calls, fusions
of them); `xla_dot` / `xla_conv` are the formulas, as XLA's `HloCostAnalysis` counts them
(a multiply-add is 2; its convolution count leaves out padded taps, the textbook one here
counts them, like the PyTorch rule). Sources: XLA's `hlo_cost_analysis.cc` (HandleDot,
HandleConvolution) and the operation semantics of DotGeneral / Conv.

The GPU's peak: `gpu_model` maps the device name a trace gives (Kineto
`deviceProperties`, XSpace `gpu_device_name`) to a row of the datasheet table
`sql/metrics/gpu_peaks.sql`, which the `mfu`, `roofline` and `op_flops` queries read.

Unknown ops (no rule, no reported figure) keep `flops` NULL: they count zero, and the
`flops_unknown_ops` query lists them with the GPU time they launched.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

# Element size by dtype name (nodes spell dtypes float32, bfloat16, ... for every format).
ELEMENT_BYTES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16, "double": 8, "float": 4, "half": 2,
}
# dtype -> the precision class the datasheet peaks are listed by (sql/metrics/gpu_peaks.sql).
PRECISION = {
    "float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "float16": "fp16",
    "half": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "int8": "int8",
}

Shape = list  # list[int]


def _numel(shape: Shape) -> int:
    return math.prod(shape) if shape else 1


numel = _numel


def xla_dot(out: Shape, lhs: Shape, lhs_contracting: list[int]) -> int | None:
    """An XLA dot: each output element sums over the contracting dims of the lhs,
    2 * numel(out) * prod(lhs[c]); None when a contracting dim is not in the lhs."""
    if any(not 0 <= c < len(lhs) for c in lhs_contracting):
        return None
    return 2 * _numel(out) * _numel([lhs[c] for c in lhs_contracting])


def xla_conv(out: Shape, kernel: Shape, spatial: list[int], input_feature: int) -> int | None:
    """An XLA convolution: each output element (batch, spatial, output feature) sums over
    the kernel window and the kernel's input features (Cin/groups),
    2 * numel(out) * prod(kernel[spatial]) * kernel[input_feature]."""
    if not 0 <= input_feature < len(kernel) or any(not 0 <= s < len(kernel) for s in spatial):
        return None
    return 2 * _numel(out) * _numel([kernel[s] for s in spatial]) * kernel[input_feature]


def _concrete(params: dict | None, i: int) -> str | None:
    vals = (params or {}).get("Concrete Inputs")
    if isinstance(vals, list) and i < len(vals) and vals[i] not in ("", None):
        return str(vals[i])
    return None


def _ints(text: str | None, n: int, default: int) -> list[int]:
    """'[1, 1]' or '2' as n ints; `default` when absent."""
    if text is None:
        return [default] * n
    try:
        v = json.loads(text)
    except ValueError:
        return [default] * n
    v = v if isinstance(v, list) else [v]
    if not v or not all(isinstance(x, int) for x in v):
        return [default] * n
    return v * n if len(v) == 1 else v[:n] + [v[-1]] * (n - len(v))


# A rule: (shapes, concrete) -> (flops, [tensors read], output shape) or None when the
# shapes do not fit it.
Result = tuple[int, list[Shape], Shape]


def _mm(s: list, p: dict | None) -> Result | None:
    a, b = s[0], s[1]
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    (m, k), n = a, b[1]
    return 2 * m * n * k, [a, b], [m, n]


def _addmm(s: list, p: dict | None) -> Result | None:
    r = _mm(s[1:3], p)
    return None if r is None else (r[0], [s[0], *r[1]], r[2])


def _bmm(s: list, p: dict | None) -> Result | None:
    a, b = s[0], s[1]
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        return None
    (bt, m, k), n = a, b[2]
    return 2 * bt * m * n * k, [a, b], [bt, m, n]


def _baddbmm(s: list, p: dict | None) -> Result | None:
    r = _bmm(s[1:3], p)
    return None if r is None else (r[0], [s[0], *r[1]], r[2])


def _matmul(s: list, p: dict | None) -> Result | None:
    a, b = s[0], s[1]
    if not a or not b:
        return None
    a2 = [1, *a] if len(a) == 1 else a  # a 1-D operand is a row (a) / column (b) vector
    b2 = [*b, 1] if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    m, k, n = a2[-2], a2[-1], b2[-1]
    ba, bb = a2[:-2], b2[:-2]
    nb = max(len(ba), len(bb))
    ba, bb = [1] * (nb - len(ba)) + ba, [1] * (nb - len(bb)) + bb
    if any(x != y and 1 not in (x, y) for x, y in zip(ba, bb)):
        return None
    batch = [max(x, y) for x, y in zip(ba, bb)]
    out = batch + ([m] if len(a) > 1 else []) + ([n] if len(b) > 1 else [])
    return 2 * _numel(batch) * m * n * k, [a, b], out


def _linear(s: list, p: dict | None) -> Result | None:
    x, w = s[0], s[1]
    if not x or len(w) != 2 or x[-1] != w[1]:
        return None
    rows, n, k = _numel(x[:-1]), w[0], w[1]
    read = [x, w] + ([s[2]] if len(s) > 2 and s[2] else [])
    return 2 * rows * n * k, read, [*x[:-1], n]


def _conv(x: Shape, w: Shape, stride: list, pad: list, dil: list, transposed: bool) -> Result | None:
    nd = len(w) - 2
    if nd < 1 or len(x) != nd + 2:
        return None
    if transposed:  # W[Cin, Cout/groups, k...]: one MAC per input position and weight
        flops = 2 * x[0] * _numel(x[2:]) * _numel(w)
        return flops, [x, w], [x[0], w[1], *x[2:]]  # output spatial size not derived
    out = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, s, p, d in zip(x[2:], w[2:], stride, pad, dil)]
    if any(o <= 0 for o in out):
        return None
    return 2 * x[0] * _numel(out) * _numel(w), [x, w], [x[0], w[0], *out]


def _padding(text: str | None, nd: int, x: Shape, w: Shape, dil: list) -> list[int]:
    """Padding from its concrete text; conv2d's 'same' / 'valid' strings too."""
    if text is not None and text.strip("'\"") == "valid":
        return [0] * nd
    if text is not None and text.strip("'\"") == "same":  # output size = input size (stride 1)
        return [d * (k - 1) // 2 for k, d in zip(w[2:], dil)]
    return _ints(text, nd, 0)


def _conv_args(s: list, p: dict | None, stride_i: int, pad_i: int, dil_i: int,
               transposed_i: int | None = None) -> Result | None:
    x, w = s[0], s[1]
    if not x or not w:
        return None
    nd = len(w) - 2
    stride, dil = _ints(_concrete(p, stride_i), nd, 1), _ints(_concrete(p, dil_i), nd, 1)
    pad = _padding(_concrete(p, pad_i), nd, x, w, dil)
    transposed = transposed_i is not None and _concrete(p, transposed_i) == "True"
    return _conv(x, w, stride, pad, dil, transposed)


def _conv_nd(s, p):  # aten::conv{1,2,3}d(input, weight, bias, stride, padding, dilation, groups)
    return _conv_args(s, p, 3, 4, 5)


def _convolution(s, p):  # aten::convolution / _convolution(input, weight, bias, stride, padding, dilation, transposed, ...)
    return _conv_args(s, p, 3, 4, 5, 6)


def _cudnn_conv(s, p):  # aten::cudnn_convolution / miopen / mkldnn(input, weight, padding, stride, dilation, groups, ...)
    return _conv_args(s, p, 3, 2, 4)


def _conv_backward(s: list, p: dict | None) -> Result | None:
    """aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask): grad_input and grad_weight
    each cost the forward's FLOPs (flop_counter.conv_backward_flop)."""
    if len(s) < 3:
        return None
    r = _conv_args([s[1], s[2]], p, 4, 5, 6, 7)
    if r is None:
        return None
    mask = (_concrete(p, 10) or "[True, True, True]").strip("[]").replace(" ", "").split(",")
    n = sum(1 for m in mask[:2] if m == "True")
    return r[0] * n, [s[0], s[1], s[2]], r[2]


def _sdpa(q_i: int, causal_i: int | None, layout: str = "bhsd", factor: int = 1, mask_type: bool = False):
    """Attention: QK^T is 2*B*H*Sq*Sk*Dqk, PV is 2*B*H*Sq*Sk*Dv (flop_counter.sdpa_flop_count);
    halved when causal (half the scores are masked out and skipped by fused kernels).
    `factor` 2 for the backward (flop_counter.sdpa_backward_flop_count: 4 matmuls)."""
    def rule(s: list, p: dict | None) -> Result | None:
        if len(s) < q_i + 3:
            return None
        q, k, v = s[q_i], s[q_i + 1], s[q_i + 2]
        if len(q) != 4 or len(k) != 4 or len(v) != 4:
            return None
        if layout == "bhsd":
            (b, h, sq, dqk), sk, dv = q, k[2], v[3]
        else:  # bshd: the flash / efficient kernels' own layout
            (b, sq, h, dqk), sk, dv = q, k[1], v[3]
        flops = 2 * b * h * sq * sk * (dqk + dv) * factor
        c = _concrete(p, causal_i) if causal_i is not None else None
        if (c not in (None, "0", "False") if mask_type else c == "True"):
            flops //= 2
        out = [b, h, sq, dv] if layout == "bhsd" else [b, sq, h, dv]
        return flops, [q, k, v], out
    return rule


def _conv_ops() -> dict[str, Callable]:
    out = {f"aten::conv{n}d": _conv_nd for n in (1, 2, 3)}
    out.update({"aten::convolution": _convolution, "aten::_convolution": _convolution,
                "aten::convolution_backward": _conv_backward})
    for name in ("aten::cudnn_convolution", "aten::miopen_convolution", "aten::mkldnn_convolution",
                 "aten::cudnn_convolution_relu"):
        out[name] = _cudnn_conv
    return out


# op_type -> (rule name, rule). Each PyTorch op's signature is ATen's native_functions.yaml.
RULES: dict[str, tuple[str, Callable]] = {
    "aten::mm": ("matmul", _mm), "aten::addmm": ("matmul", _addmm), "aten::bmm": ("matmul", _bmm),
    "aten::baddbmm": ("matmul", _baddbmm), "aten::matmul": ("matmul", _matmul), "aten::linear": ("matmul", _linear),
    **{op: ("conv", fn) for op, fn in _conv_ops().items()},
    # (q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    "aten::scaled_dot_product_attention": ("sdpa", _sdpa(0, 5)),
    # (q, k, v, dropout_p, is_causal, return_debug_mask, scale)
    "aten::_scaled_dot_product_flash_attention": ("sdpa", _sdpa(0, 4)),
    # (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, [return_debug_mask,] scale)
    "aten::_scaled_dot_product_efficient_attention": ("sdpa", _sdpa(0, 6)),
    "aten::_scaled_dot_product_cudnn_attention": ("sdpa", _sdpa(0, 6)),
    # (q, k, v, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, compute_log_sumexp, dropout_p, is_causal, ...)
    "aten::_cudnn_attention_forward": ("sdpa", _sdpa(0, 10)),
    # (q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...): B, S, H, D
    "aten::_flash_attention_forward": ("sdpa", _sdpa(0, 8, "bshd")),
    # (q, k, v, bias, cu_seqlens_q, cu_seqlens_k, max_q, max_k, dropout_p, custom_mask_type, ...): B, S, H, D
    "aten::_efficient_attention_forward": ("sdpa", _sdpa(0, 9, "bshd", mask_type=True)),
    # (grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    "aten::_scaled_dot_product_flash_attention_backward": ("sdpa", _sdpa(1, 11, factor=2)),
    "aten::_flash_attention_backward": ("sdpa", _sdpa(1, 11, "bshd", factor=2)),
    # (grad_out, q, k, v, bias, out, cu_seqlens_q, cu_seqlens_k, max_q, max_k, logsumexp, dropout_p,
    #  philox_seed, philox_offset, custom_mask_type, ...): B, S, H, D
    "aten::_efficient_attention_backward": ("sdpa", _sdpa(1, 14, "bshd", factor=2, mask_type=True)),
    # (grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, scale)
    "aten::_scaled_dot_product_efficient_attention_backward": ("sdpa", _sdpa(1, 11, factor=2)),
    # (grad_out, q, k, v, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k,
    #  max_q, max_k, dropout_p, is_causal, scale)
    "aten::_scaled_dot_product_cudnn_attention_backward": ("sdpa", _sdpa(1, 14, factor=2)),
    "aten::_cudnn_attention_backward": ("sdpa", _sdpa(1, 14, factor=2)),
}


# TensorFlow (StepStats / RunMetadata): a node records its output shapes only; its inputs'
# shapes are its producers' outputs (`inputs` names them, `name:k` the k-th output), looked
# up in the same batch. Rules of (input shapes, output shapes) -> FLOPs, independent of the
# transpose / adjoint attributes and of the data format, which the trace does not keep:
TF_RULES: dict[str, tuple[str, Callable]] = {}


def _tf(op_types: tuple[str, ...], rule: str):
    def register(fn):
        for op in op_types:
            TF_RULES[op] = (rule, fn)
        return fn
    return register


@_tf(("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"), "matmul")
def _tf_matmul(ins: list, outs: list) -> int | None:
    """out[..., M, N]; a holds M*K elements per batch whether transposed or not:
    2 * numel(out) * K, K = a[-2] * a[-1] / M."""
    a, out = ins[0], outs[0]
    if len(a) < 2 or len(out) < 2 or out[-2] <= 0 or (a[-2] * a[-1]) % out[-2]:
        return None
    return 2 * _numel(out) * (a[-2] * a[-1] // out[-2])


@_tf(("Conv2D", "Conv3D"), "conv")
def _tf_conv(ins: list, outs: list) -> int | None:
    """filter [kh, kw, Cin, Cout] (TF's HWIO, any data_format): 2 * numel(out) * kh*kw*Cin."""
    w = ins[1]
    return 2 * _numel(outs[0]) * _numel(w[:-1]) if len(w) >= 3 else None


@_tf(("Conv2DBackpropInput",), "conv")
def _tf_conv_input_grad(ins: list, outs: list) -> int | None:
    """(input_sizes, filter, out_backprop): the forward's FLOPs, 2 * numel(out_backprop) * kh*kw*Cin."""
    w, dy = ins[1], ins[2]
    return 2 * _numel(dy) * _numel(w[:-1]) if len(w) >= 3 and dy else None


@_tf(("Conv2DBackpropFilter",), "conv")
def _tf_conv_filter_grad(ins: list, outs: list) -> int | None:
    """(input, filter_sizes, out_backprop) -> filter [kh, kw, Cin, Cout]: 2 * numel(out_backprop) * kh*kw*Cin."""
    w, dy = outs[0], ins[2]
    return 2 * _numel(dy) * _numel(w[:-1]) if len(w) >= 3 and dy else None


def tf_op_flops(op_type: str, ins: list, outs: list, dtypes: list | None) -> tuple[int, int | None, str] | None:
    """(flops, bytes, rule) of a TF node from its inputs' and outputs' shapes, or None."""
    entry = TF_RULES.get(op_type)
    if entry is None or not outs or outs[0] is None or any(s is None for s in ins):
        return None
    rule, fn = entry
    try:
        flops = fn(ins, outs)
    except (IndexError, TypeError, ZeroDivisionError):
        return None
    if flops is None:
        return None
    size = ELEMENT_BYTES.get(_first_dtype(dtypes) or "")
    nbytes = (sum(_numel(t) for t in ins) + sum(_numel(t) for t in outs if t)) * size if size else None
    return flops, nbytes, rule


def _producer_shapes(batch: pa.RecordBatch, inputs: list) -> dict[str, list]:
    """node name -> its output shapes, for the producers these inputs name (same batch)."""
    names = sorted({i.split(":")[0] for ins in inputs if ins for i in ins})
    if not names:
        return {}
    hit = pc.indices_nonzero(pc.fill_null(pc.is_in(batch.column("node_name"), value_set=pa.array(names)), False))
    found = zip(batch.column("node_name").take(hit).to_pylist(), batch.column("output_shapes").take(hit).to_pylist())
    return {n: shapes for n, shapes in found if shapes}


def _input_shapes(inputs: list | None, producers: dict[str, list]) -> list | None:
    out = []
    for i in inputs or ():
        name, _, slot = i.partition(":")
        shapes = producers.get(name)
        k = int(slot) if slot.isdigit() else 0
        if shapes is None or k >= len(shapes):
            return None
        out.append(shapes[k])
    return out or None


REPORTED = "reported"
# Ops whose rule reads `Concrete Inputs` (the others need only shapes and dtypes).
_CONCRETE = frozenset(op for op, (rule, _) in RULES.items() if rule in ("conv", "sdpa"))
# Ops the PyTorch profiler gives a `flops` arg with `with_flops=True` (computeFlops in
# torch/csrc/profiler/util.cpp): conv2d, mm, addmm, bmm, baddbmm, mul, add.
PROFILER_FLOPS_OPS = ("aten::conv2d", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mul", "aten::add")
_CANDIDATE_OPS = pa.array(sorted(set(RULES) | set(PROFILER_FLOPS_OPS) | set(TF_RULES)), pa.string())
_decode = msgspec.json.decode


def op_flops(op_type: str, shapes: list | None, dtypes: list | None,
             params: dict | None) -> tuple[int, int | None, str] | None:
    """(flops, bytes, rule) of one op by its rule, or None (no rule, or shapes unknown)."""
    entry = RULES.get(op_type)
    if entry is None or not shapes or None in shapes[:3]:
        return None
    rule, fn = entry
    try:
        r = fn(shapes, params)
    except (IndexError, TypeError, ValueError):
        return None
    if r is None:
        return None
    flops, read, out = r
    size = ELEMENT_BYTES.get(_first_dtype(dtypes) or "")
    nbytes = (sum(_numel(t) for t in read if t) + _numel(out)) * size if size else None
    return flops, nbytes, rule


def _first_dtype(dtypes: list | None) -> str | None:
    return next((d for d in dtypes or () if d in ELEMENT_BYTES), None)


def precision(dtypes: list | None) -> str | None:
    """The datasheet precision (fp32, bf16, ...) of an op's first floating input."""
    return next((PRECISION[d] for d in dtypes or () if d in PRECISION), None)


def _reported(params: str | None) -> int | None:
    """The PyTorch profiler's own `flops` arg (`with_flops=True`), kept in `params`."""
    try:
        v = _decode(params).get("flops")
    except (ValueError, AttributeError, TypeError, msgspec.DecodeError):
        return None
    return int(v) if isinstance(v, (int, float)) and v >= 0 else None


def annotate_nodes(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` (nodes) with flops, memory_bytes, flops_rule, flops_dtype, flops_counted filled
    where a rule or a reported figure gives them. Only the rows of an op type with a rule
    or a profiler figure, or with FLOPs already set, are visited in Python (~280 of the H200
    fixture's 7,245 ops), and their `params` decoded only where the rule reads them."""
    names = batch.schema.names
    n = batch.num_rows
    if n == 0 or "flops_rule" not in names:
        return batch
    cand = pc.or_(pc.fill_null(pc.is_in(batch.column("op_type"), value_set=_CANDIDATE_OPS), False),
                  pc.is_valid(batch.column("flops")))
    take = pc.indices_nonzero(cand)
    if len(take) == 0:
        return batch
    col = {c: batch.column(c).take(take).to_pylist()
           for c in ("op_type", "flops", "memory_bytes", "flops_rule", "flops_dtype", "flops_counted")}
    flops, mem, rule = col["flops"], col["memory_bytes"], col["flops_rule"]
    # shapes, dtypes and params are read only where a rule or the precision may need them: a
    # row with its FLOPs and precision set (a reader's own, e.g. XLA ops) never reads them
    need = [j for j, (f, d) in enumerate(zip(flops, col["flops_dtype"])) if f is None or d is None]
    for c in ("input_shapes", "input_dtypes", "params"):
        col[c] = values = [None] * len(flops)
        if need:
            for j, v in zip(need, batch.column(c).take(take).take(pa.array(need, pa.int64())).to_pylist()):
                values[j] = v
    # a reader that knows an op's precision (XLA: the dot's operands) sets flops_dtype itself
    dtype = [d0 if d0 is not None else precision(d) for d0, d in zip(col["flops_dtype"], col["input_dtypes"])]
    tf_rows = [j for j, op in enumerate(col["op_type"]) if op in TF_RULES and flops[j] is None]
    if tf_rows:
        _tf_rows(batch, take, tf_rows, flops, mem, rule, dtype)
    for j, op in enumerate(col["op_type"]):
        if op in TF_RULES:
            continue
        if flops[j] is not None:
            rule[j] = rule[j] or REPORTED
            continue
        text = col["params"][j]
        if text is not None and '"flops":' in text and (f := _reported(text)) is not None:
            flops[j], rule[j] = f, REPORTED
            continue
        p = None
        if op in _CONCRETE and text is not None and "Concrete Inputs" in text:
            try:
                p = _decode(text)
            except (ValueError, msgspec.DecodeError):
                p = None
        r = op_flops(op, col["input_shapes"][j], col["input_dtypes"][j], p)
        if r is not None:
            flops[j], b, rule[j] = r
            mem[j] = mem[j] if mem[j] is not None else b
    # a reader whose ops never nest (XLA's device ops) sets flops_counted itself
    counted = [c0 if c0 is not None else c
               for c0, c in zip(col["flops_counted"], _counted(batch, take, flops, col["op_type"], col["flops_counted"]))]
    if "parent_seq" in names:  # an execution trace's op: its Kineto twin (same rf_id) counts it
        et = batch.column("parent_seq").take(take).is_valid().to_pylist()
        counted = [False if e and c is not None else c for e, c in zip(et, counted)]
    out = {"flops": flops, "memory_bytes": mem, "flops_rule": rule, "flops_dtype": dtype, "flops_counted": counted}
    for name, values in out.items():  # the candidates' values into the column, in row order
        i = names.index(name)
        typ = batch.schema.field(i).type
        base = batch.column(i)
        batch = batch.set_column(i, name, pc.replace_with_mask(base, cand, pa.array(values, typ)))
    return batch


def _tf_rows(batch: pa.RecordBatch, take: pa.Array, rows: list[int], flops: list, mem: list, rule: list,
             dtype: list) -> None:
    """FLOPs of the TF candidates (positions `rows` of `take`), their inputs' shapes from
    their producers' outputs in the batch."""
    sub = take.take(pa.array(rows, pa.int64()))
    cols = {c: batch.column(c).take(sub).to_pylist() for c in ("op_type", "inputs", "output_shapes", "output_dtypes")}
    producers = _producer_shapes(batch, cols["inputs"])
    for r, j in enumerate(rows):
        ins = _input_shapes(cols["inputs"][r], producers)
        if ins is None:
            continue
        res = tf_op_flops(cols["op_type"][r], ins, cols["output_shapes"][r], cols["output_dtypes"][r])
        if res is not None:
            flops[j], b, rule[j] = res
            mem[j] = mem[j] if mem[j] is not None else b
            dtype[j] = dtype[j] or precision(cols["output_dtypes"][r])


def _counted(batch: pa.RecordBatch, take: pa.Array, flops: list, ops: list, preset: list) -> list:
    """Per candidate row: False when it encloses another row with FLOPs of the same thread
    (that inner op carries them), True otherwise; None where it has no FLOPs. TF nodes do
    not nest (an executor thread's nodes may overlap in time): always True."""
    tids = batch.column("thread_id").take(take).to_pylist()
    starts = batch.column("start_ns").take(take).to_pylist()
    durs = batch.column("duration_ns").take(take).to_pylist()
    out: list = [None if f is None else True for f in flops]
    timed = [j for j in range(len(flops)) if flops[j] is not None and starts[j] is not None
             and durs[j] is not None and ops[j] not in TF_RULES and preset[j] is None]
    # per thread, by start then longest first: a stack of the open rows enclosing the next
    timed.sort(key=lambda j: (tids[j] if tids[j] is not None else -1, starts[j], -durs[j]))
    stack: list[tuple[Any, int, int]] = []  # (thread, end, row)
    for j in timed:
        end = starts[j] + durs[j]
        while stack and (stack[-1][0] != tids[j] or stack[-1][1] < end):
            stack.pop()
        if stack:  # its parent's ancestors were marked when the parent was seen
            out[stack[-1][2]] = False
        stack.append((tids[j], end, j))
    return out


# The GPU model as the datasheet table (sql/metrics/gpu_peaks.sql) names it, from the name
# the trace gives (Kineto deviceProperties[].name, XSpace gpu_device_name), most specific
# first; A100s also by memory size (40 GB and 80 GB parts differ in bandwidth).
_MODELS = (
    ("h200", "nvl", "H200 NVL"), ("h200", "", "H200 SXM"),
    ("h100", "pcie", "H100 PCIe"), ("h100", "nvl", "H100 NVL"), ("h100", "", "H100 SXM"),
    ("a100", "pcie", "A100 PCIe"), ("a100", "", "A100 SXM"),
    ("l40s", "", "L40S"), ("l4", "", "L4"),
    ("mi300x", "", "MI300X"), ("mi250x", "", "MI250X"), ("mi250", "", "MI250"),
)


def gpu_model(name: str | None, memory_bytes: int | None = None) -> str | None:
    """'NVIDIA H200' -> 'H200 SXM'; None for a name the datasheet table does not list."""
    if not isinstance(name, str):
        return None
    low = name.lower().replace("-", " ")
    words = set(low.split())
    for key, extra, model in _MODELS:
        if (key in words or (len(key) > 3 and key in low)) and extra in low:
            if model.startswith("A100"):
                big = "80gb" in low or (memory_bytes or 0) > 60 * 2**30
                return f"{model} {'80GB' if big else '40GB'}"
            return model
    return None


def device_facts(metadata: dict) -> dict:
    """Run metadata keys for the peak lookups (`gpu_name`, `gpu_model`, and the trace's own
    `gpu_memory_bytes_per_s` where XSpace states it), from a run's reader metadata."""
    name = mem = bw = None
    props = metadata.get("device_properties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        name, mem = props[0].get("name"), props[0].get("totalGlobalMem")
    devices = metadata.get("devices")
    if name is None and isinstance(devices, dict) and devices:
        first = devices[sorted(devices)[0]]
        if isinstance(first, dict):
            name, mem, bw = first.get("gpu_device_name"), first.get("memory_size"), first.get("memory_bandwidth")
    out = {}
    if isinstance(name, str):
        out["gpu_name"] = name
        if model := gpu_model(name, mem if isinstance(mem, int) else None):
            out["gpu_model"] = model
    if isinstance(bw, int) and bw > 0:
        out["gpu_memory_bytes_per_s"] = bw
    return out
