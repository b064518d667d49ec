"""XLA HLO modules as an XSpace carries them: the FLOPs and bytes of each launched op.

A JAX / TF2-XLA profile's `/host:metadata` plane has one event metadata per compiled
program, with an `Hlo Proto` stat (bytes: an `xla.HloProto`, whose field 1 is the
`HloModuleProto`) and a `program_id` stat. The GPU plane's kernels name their program
(`program_id`, `hlo_module`) and the op that launched them (`hlo_op`); a kernel run inside
a command buffer (a CUDA graph) names the buffer (`command_buffer_N`) instead, and its own
name is the launched fusion's name with every character outside `[A-Za-z0-9_]` made `_`
(`gemm_fusion_dot_general.4` -> `gemm_fusion_dot_general_4`).

The module is decoded by upb, as classes declared here (`_classes`) that hold only what
the FLOPs rules need (a 67 KB JAX profile's modules decoded on the wire in Python cost ten
times its events: bench/RESULTS.md "Session 10"), with the field numbers of XLA's `xla/service/hlo.proto` and `xla/xla_data.proto`:

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
from functools import cached_property
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from tracedb import flops as rules

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


class Instruction:
    """One instruction (an HloInstructionProto as upb parsed it): its name, opcode and id
    read at once, the rest when a FLOPs rule asks (most instructions of a module are
    never asked: they sit in computations no launched op reaches)."""

    def __init__(self, m: Any):
        self.m = m
        self.name = _text(m.name)
        self.opcode = _text(m.opcode)
        self.id = m.id

    @cached_property
    def shape(self) -> Shape:
        return _shape(self.m.shape)

    @cached_property
    def operand_ids(self) -> list[int]:
        return list(self.m.operand_ids)

    @cached_property
    def called_ids(self) -> list[int]:
        return list(self.m.called_computation_ids)

    @property
    def fusion_kind(self) -> str:
        return _text(self.m.fusion_kind)

    @property
    def custom_call_target(self) -> str:
        return _text(self.m.custom_call_target)

    @property
    def backend_config(self) -> bytes:
        return self.m.backend_config

    @property
    def lhs_contracting(self) -> list[int]:
        return list(self.m.dot_dimension_numbers.lhs_contracting_dimensions)

    @property
    def kernel_input_feature(self) -> int:
        return self.m.convolution_dimension_numbers.kernel_input_feature_dimension

    @property
    def kernel_spatial(self) -> list[int]:
        return list(self.m.convolution_dimension_numbers.kernel_spatial_dimensions)

    @property
    def batch_group_count(self) -> int:
        return self.m.batch_group_count or 1


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


def _classes() -> dict[str, type]:
    """upb classes for the few messages of XLA's `hlo.proto` / `xla_data.proto` the FLOPs
    rules read, declared here by field number (the rest of each message is skipped as
    unknown fields). Text fields are declared `bytes` and decoded with "replace", so a
    name that is not UTF-8 does not fail the module."""
    T, D = descriptor_pb2.FieldDescriptorProto, descriptor_pb2.FileDescriptorProto
    one, many = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    text, i64, msg = T.TYPE_BYTES, T.TYPE_INT64, T.TYPE_MESSAGE
    messages = {
        "Shape": [("element_type", 2, T.TYPE_INT32, one), ("dimensions", 3, i64, many),
                  ("tuple_shapes", 4, msg, many, "Shape")],
        "DotDims": [("lhs_contracting_dimensions", 1, i64, many)],
        "ConvDims": [("kernel_input_feature_dimension", 3, i64, one), ("kernel_spatial_dimensions", 6, i64, many)],
        "Instruction": [("name", 1, text, one), ("opcode", 2, text, one), ("shape", 3, msg, one, "Shape"),
                        ("fusion_kind", 11, text, one), ("convolution_dimension_numbers", 16, msg, one, "ConvDims"),
                        ("custom_call_target", 28, text, one), ("dot_dimension_numbers", 30, msg, one, "DotDims"),
                        ("id", 35, i64, one), ("operand_ids", 36, i64, many), ("called_computation_ids", 38, i64, many),
                        ("backend_config", 43, T.TYPE_BYTES, one), ("batch_group_count", 58, i64, one)],
        "Computation": [("instructions", 2, msg, many, "Instruction"), ("id", 5, i64, one)],
        "Module": [("name", 1, text, one), ("computations", 3, msg, many, "Computation")],
        "HloProto": [("hlo_module", 1, T.TYPE_BYTES, one)],  # bytes: a bare module is tried too
    }
    f = D(name="tracedb_hlo_subset.proto", package="tracedb_hlo", syntax="proto3")
    for name, fields in messages.items():
        m = f.message_type.add(name=name)
        for fname, number, typ, label, *ref in fields:
            fd = m.field.add(name=fname, number=number, type=typ, label=label)
            if ref:
                fd.type_name = f".tracedb_hlo.{ref[0]}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tracedb_hlo.{name}"))
            for name in messages}


_PB = _classes()


def _text(v: bytes) -> str:
    return v.decode("utf-8", "replace")


def _shape(m: Any) -> Shape:
    return Shape(m.element_type, list(m.dimensions), [_shape(t) for t in m.tuple_shapes])


def parse_module(data: bytes) -> Module:
    """The launched ops of an `Hlo Proto` stat (an HloProto, or a bare HloModuleProto),
    decoded by upb (`_classes`). ValueError when the bytes are not one."""
    try:
        inner = _PB["HloProto"].FromString(data).hlo_module
        if not inner:
            raise ValueError("no HloModuleProto in field 1")
        try:
            module = _PB["Module"].FromString(inner)
        except DecodeError:  # field 1 of a bare module is its name
            module = None
        if module is None or not module.computations:
            module = _PB["Module"].FromString(data)
    except DecodeError as e:
        raise ValueError(f"not an HloProto or HloModuleProto: {e}") from None
    comps: dict[int, list[Instruction]] = {}
    order: list[int] = []
    for c in module.computations:
        comps[c.id] = [Instruction(i) for i in c.instructions]
        order.append(c.id)
    return _Costs(_text(module.name), comps, order).module()


class _Costs:
    """FLOPs and bytes of a module's launched instructions."""

    def __init__(self, name: str, comps: dict[int, list[Instruction]], order: list[int]):
        self.name, self.comps = name, comps
        self.by_id = {i.id: i for body in comps.values() for i in body}
        # Computations a fusion (or a reduce, a map, ...) calls run inside their caller's kernel;
        # the others (the entry, while / conditional bodies) hold the launched instructions.
        called = {c for body in comps.values() for i in body if i.opcode not in _CONTROL for c in i.m.called_computation_ids}
        self.launched = [i for cid in order if cid not in called for i in comps[cid]]

    def _operands(self, ins: Instruction) -> list[Shape]:
        return [self.by_id[o].shape if o in self.by_id else Shape() for o in ins.operand_ids]

    def cost(self, ins: Instruction, depth: int = 0) -> tuple[int, str, str | None] | None:
        """(FLOPs, rule, dtype) of an instruction (a fusion: of the dots and convolutions in it)."""
        if ins.opcode not in ("dot", "convolution", "custom-call", "fusion"):
            return None
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
