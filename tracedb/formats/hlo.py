"""XLA HLO modules as an XSpace carries them: the FLOPs and bytes of each launched op.

A JAX / TF2-XLA profile's `/host:metadata` plane has one event metadata per compiled
program, with an `Hlo Proto` stat (bytes: an `xla.HloProto`, whose field 1 is the
`HloModuleProto`) and a `program_id` stat. The GPU plane's kernels name their program
(`program_id`, `hlo_module`) and the op that launched them (`hlo_op`); a kernel run inside
a command buffer (a CUDA graph) names the buffer (`command_buffer_N`) instead, and its own
name is the launched fusion's name with every character outside `[A-Za-z0-9_]` made `_`
(`gemm_fusion_dot_general.4` -> `gemm_fusion_dot_general_4`).

The module is decoded on the wire (`base.wire_fields`), reading only what the FLOPs rules
need, with the field numbers of XLA's `xla/service/hlo.proto` and `xla/xla_data.proto`:

  HloModuleProto       name 1, computations 3
  HloComputationProto  name 1, instructions 2, id 5
  HloInstructionProto  name 1, opcode 2, shape 3, fusion_kind 11, convolution_dimension_numbers 16,
                       custom_call_target 28, dot_dimension_numbers 30, id 35, operand_ids 36,
                       called_computation_ids 38, backend_config 43, batch_group_count 58
  ShapeProto           element_type 2, dimensions 3, tuple_shapes 4
  DotDimensionNumbers  lhs_contracting_dimensions 1
  ConvolutionDimensionNumbers  kernel_input_feature_dimension 3, kernel_spatial_dimensions 6

FLOPs (rules in `tracedb.flops`: `xla_dot`, `xla_conv`) of a launched instruction:
`dot`; `convolution`; cuDNN convolutions (`__cudnn$conv*` custom calls: forward, backward
input, backward filter, each the forward convolution's FLOPs, its shapes read from the
operands and result as the call's kind places them); cuBLAS GEMMs (`__cublas$gemm`,
`__cublas$lt$matmul*`: the dimension numbers in the JSON backend config); a fusion: the sum
over the dots and convolutions of its computation (nested fusions too). Other ops: none.
Bytes of an op with FLOPs: its operands plus its result (a custom call's first result
element: the second is cuDNN's / cuBLAS's scratch buffer), times the element size.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tracedb import flops as rules
from tracedb.formats.base import WIRE_LEN, packed_ints, signed64, wire_fields

# xla.PrimitiveType -> (the dtype name nodes use, bytes per element); sub-byte types absent.
PRIMITIVE = {
    1: ("bool", 1), 2: ("int8", 1), 3: ("int16", 2), 4: ("int32", 4), 5: ("int64", 8),
    6: ("uint8", 1), 7: ("uint16", 2), 8: ("uint32", 4), 9: ("uint64", 8),
    10: ("float16", 2), 11: ("float32", 4), 12: ("float64", 8), 15: ("complex64", 8),
    16: ("bfloat16", 2), 18: ("complex128", 16), 19: ("float8_e5m2", 1), 20: ("float8_e4m3fn", 1),
    24: ("float8_e5m2fnuz", 1), 25: ("float8_e4m3fnuz", 1), 28: ("float8_e4m3", 1),
}
TUPLE = 13
_CUDNN_FORWARD = ("__cudnn$convForward", "__cudnn$convBiasActivationForward", "__cudnn$convForwardGraph")
_CUDNN_BACKWARD_INPUT = ("__cudnn$convBackwardInput",)
_CUDNN_BACKWARD_FILTER = ("__cudnn$convBackwardFilter",)
_CUBLAS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")
# Ops whose called computations hold launched instructions (a fusion's, a reduce's run in its kernel).
_CONTROL = ("while", "conditional", "call", "async-start", "async-update", "async-done")
_KERNEL_NAME = re.compile(r"[^A-Za-z0-9_]")


@dataclass
class Shape:
    element_type: int = 0
    dims: list[int] = field(default_factory=list)
    tuple_shapes: list["Shape"] = field(default_factory=list)

    def arrays(self) -> list["Shape"]:
        """The array shapes in it (a tuple's elements, flattened)."""
        if self.element_type != TUPLE:
            return [self]
        return [a for t in self.tuple_shapes for a in t.arrays()]

    def first(self) -> "Shape":
        return self.tuple_shapes[0].first() if self.element_type == TUPLE and self.tuple_shapes else self

    def nbytes(self) -> int | None:
        size = PRIMITIVE.get(self.element_type, (None, None))[1]
        return None if size is None else rules.numel(self.dims) * size

    def dtype(self) -> str | None:
        return PRIMITIVE.get(self.element_type, (None, None))[0]


@dataclass
class Instruction:
    name: str = ""
    opcode: str = ""
    id: int = 0
    shape: Shape = field(default_factory=Shape)
    operand_ids: list[int] = field(default_factory=list)
    called_ids: list[int] = field(default_factory=list)
    fusion_kind: str = ""
    custom_call_target: str = ""
    backend_config: bytes = b""
    lhs_contracting: list[int] = field(default_factory=list)
    kernel_input_feature: int = 0
    kernel_spatial: list[int] = field(default_factory=list)
    batch_group_count: int = 1


@dataclass
class Op:
    """A launched instruction with what the nodes row of each of its executions holds."""

    name: str
    op_type: str
    flops: int | None
    bytes: int | None
    rule: str | None
    dtype: str | None  # the dtype the dot / convolution reads (the op's precision)
    input_shapes: list
    input_dtypes: list
    output_shapes: list
    output_dtypes: list
    fusion_kind: str | None


@dataclass
class Module:
    name: str
    ops: dict[str, Op]  # launched instruction name -> Op
    by_kernel: dict[str, str]  # kernel name (the sanitized instruction name) -> instruction name


def kernel_name(instruction: str) -> str:
    """The name XLA:GPU gives the kernel it emits for an instruction."""
    return _KERNEL_NAME.sub("_", instruction)


def _shape(buf: bytes) -> Shape:
    s = Shape()
    for fn, wt, v in wire_fields(buf):
        if fn == 2:
            s.element_type = v
        elif fn == 3:
            s.dims += [signed64(d) for d in packed_ints(wt, v)]
        elif fn == 4:
            s.tuple_shapes.append(_shape(v))
    return s


def _instruction(buf: bytes) -> Instruction:
    ins = Instruction()
    for fn, wt, v in wire_fields(buf):
        if fn == 1:
            ins.name = v.decode("utf-8", "replace")
        elif fn == 2:
            ins.opcode = v.decode("utf-8", "replace")
        elif fn == 3:
            ins.shape = _shape(v)
        elif fn == 11:
            ins.fusion_kind = v.decode("utf-8", "replace")
        elif fn == 16:
            for f, w, x in wire_fields(v):
                if f == 3:
                    ins.kernel_input_feature = x
                elif f == 6:
                    ins.kernel_spatial += packed_ints(w, x)
        elif fn == 28:
            ins.custom_call_target = v.decode("utf-8", "replace")
        elif fn == 30:
            ins.lhs_contracting += [d for f, w, x in wire_fields(v) if f == 1 for d in packed_ints(w, x)]
        elif fn == 35:
            ins.id = v
        elif fn == 36:
            ins.operand_ids += packed_ints(wt, v)
        elif fn == 38:
            ins.called_ids += packed_ints(wt, v)
        elif fn == 43 and wt == WIRE_LEN:
            ins.backend_config = v
        elif fn == 58:
            ins.batch_group_count = v or 1
    return ins


def parse_module(data: bytes) -> Module:
    """The launched ops of an `Hlo Proto` stat (an HloProto, or a bare HloModuleProto).
    ValueError when the bytes are not one."""
    module = next((v for fn, wt, v in wire_fields(data) if fn == 1 and wt == WIRE_LEN), None)
    if module is None:
        raise ValueError("no HloModuleProto in field 1")
    fields = list(wire_fields(module))
    if not any(fn == 3 and wt == WIRE_LEN for fn, wt, _ in fields):  # a bare HloModuleProto
        fields = list(wire_fields(data))
    name = next((v.decode("utf-8", "replace") for fn, wt, v in fields if fn == 1 and wt == WIRE_LEN), "")
    comps: dict[int, list[Instruction]] = {}
    order: list[int] = []
    for fn, wt, v in fields:
        if fn != 3 or wt != WIRE_LEN:
            continue
        cid, body = 0, []
        for f, w, x in wire_fields(v):
            if f == 2:
                body.append(_instruction(x))
            elif f == 5:
                cid = x
        comps[cid] = body
        order.append(cid)
    return _Costs(name, comps, order).module()


class _Costs:
    """FLOPs and bytes of a module's launched instructions."""

    def __init__(self, name: str, comps: dict[int, list[Instruction]], order: list[int]):
        self.name, self.comps = name, comps
        self.by_id = {i.id: i for body in comps.values() for i in body}
        # Computations a fusion (or a reduce, a map, ...) calls run inside their caller's kernel;
        # the others (the entry, while / conditional bodies) hold the launched instructions.
        called = {c for body in comps.values() for i in body if i.opcode not in _CONTROL for c in i.called_ids}
        self.launched = [i for cid in order if cid not in called for i in comps[cid]]

    def _operands(self, ins: Instruction) -> list[Shape]:
        return [self.by_id[o].shape if o in self.by_id else Shape() for o in ins.operand_ids]

    def cost(self, ins: Instruction, depth: int = 0) -> tuple[int, str, str | None] | None:
        """(FLOPs, rule, dtype) of an instruction (a fusion: of the dots and convolutions in it)."""
        ops = self._operands(ins)
        out = ins.shape.first()
        if ins.opcode == "dot" and ops:
            return rules.xla_dot(out.dims, ops[0].dims, ins.lhs_contracting), "matmul", ops[0].dtype()
        if ins.opcode == "convolution" and len(ops) > 1 and ins.batch_group_count == 1:
            f = rules.xla_conv(out.dims, ops[1].dims, ins.kernel_spatial, ins.kernel_input_feature)
            return f, "conv", ops[0].dtype()
        if ins.opcode == "custom-call" and len(ops) > 1:
            return self._library_call(ins, ops, out)
        if ins.opcode == "fusion" and depth < 8:
            parts = [c for cid in ins.called_ids for inner in self.comps.get(cid, ())
                     if (c := self.cost(inner, depth + 1)) is not None]
            if parts:
                main = max(parts, key=lambda c: c[0])
                return sum(c[0] for c in parts), main[1], main[2]
        return None

    def _library_call(self, ins: Instruction, ops: list[Shape], out: Shape) -> tuple[int, str, str | None] | None:
        t = ins.custom_call_target
        if ins.kernel_spatial or ins.kernel_input_feature:
            if t in _CUDNN_FORWARD:  # (input, kernel) -> output
                inp, kernel, result = ops[0], ops[1], out
            elif t in _CUDNN_BACKWARD_INPUT:  # (d_output, kernel) -> d_input
                inp, kernel, result = out, ops[1], ops[0]
            elif t in _CUDNN_BACKWARD_FILTER:  # (input, d_output) -> d_kernel
                inp, kernel, result = ops[0], out, ops[1]
            else:
                return None
            f = rules.xla_conv(result.dims, kernel.dims, ins.kernel_spatial, ins.kernel_input_feature)
            return f, "conv", inp.dtype()
        if t in _CUBLAS:
            try:
                cfg = json.loads(ins.backend_config or b"{}")
                dims = cfg.get("gemm_backend_config", cfg)["dot_dimension_numbers"]["lhs_contracting_dimensions"]
                contracting = [int(d) for d in dims]
            except (ValueError, KeyError, TypeError, AttributeError):
                return None
            return rules.xla_dot(out.dims, ops[0].dims, contracting), "matmul", ops[0].dtype()
        return None

    def op(self, ins: Instruction) -> Op:
        ops = self._operands(ins)
        outs = [ins.shape.first()] if ins.opcode == "custom-call" else ins.shape.arrays()
        cost = self.cost(ins)
        nbytes = None
        if cost is not None:
            sizes = [s.nbytes() for s in ops + outs]
            nbytes = sum(sizes) if None not in sizes else None  # type: ignore[arg-type]
        return Op(
            name=ins.name,
            op_type=ins.custom_call_target if ins.opcode == "custom-call" and ins.custom_call_target else ins.opcode,
            flops=cost[0] if cost else None, bytes=nbytes, rule=cost[1] if cost else None,
            dtype=cost[2] if cost else None,
            input_shapes=[s.dims for s in ops], input_dtypes=[s.dtype() for s in ops],
            output_shapes=[s.dims for s in outs], output_dtypes=[s.dtype() for s in outs],
            fusion_kind=ins.fusion_kind or None,
        )

    def module(self) -> Module:
        ops: dict[str, Op] = {}
        names: dict[str, list[str]] = {}
        for ins in self.launched:
            if ins.opcode in ("parameter", "constant", "get-tuple-element", "tuple", "bitcast"):
                continue
            ops[ins.name] = self.op(ins)
            names.setdefault(kernel_name(ins.name), []).append(ins.name)
        by_kernel = {k: v[0] for k, v in names.items() if len(v) == 1}  # an ambiguous name maps to none
        return Module(self.name, ops, by_kernel)


def hlo_modules(plane: Any, warn: Any) -> dict[Any, Module]:
    """The modules of a `/host:metadata` XPlane: by `program_id` (int) and by module name
    (str, only where one program has it). An undecodable proto is counted with `warn`."""
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    out: dict[Any, Module] = {}
    by_name: dict[str, list[Module]] = {}
    for md in plane.event_metadata.values():
        blob = program = None
        for st in md.stats:
            n = names.get(st.metadata_id)
            if n == "Hlo Proto" and st.WhichOneof("value") == "bytes_value":
                blob = st.bytes_value
            elif n == "program_id":
                program = getattr(st, st.WhichOneof("value") or "uint64_value")
        if blob is None:
            continue
        try:
            module = parse_module(blob)
        except (ValueError, RecursionError):
            warn("xspace: an Hlo Proto stat could not be decoded (its ops get no FLOPs)")
            continue
        if program is not None:
            out[int(program)] = module
        by_name.setdefault(module.name, []).append(module)
    out.update({name: mods[0] for name, mods in by_name.items() if len(mods) == 1})
    return out
