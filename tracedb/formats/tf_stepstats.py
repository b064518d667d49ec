"""TensorFlow RunMetadata / StepStats, text or binary protobuf (gzip handled by base).

`/job:...` devices hold framework ops (-> nodes, tensors, allocations); numbered
`/device:GPU:N/stream:K` devices hold GPU activity (-> kernels). `/stream:all` and
`/memcpy` only repeat rows of the numbered streams (the seed trace checks this), so
they are skipped and every GPU activity lands once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
from google.protobuf import text_format
from google.protobuf.message import DecodeError

from tracedb import devices
from tracedb.errors import TraceFormatError
from tracedb.formats.base import HEAD_BYTES, BatchBuilder, ReadContext, read_all, text_head
from tracedb.proto import run_metadata_pb2, step_stats_pb2, types_pb2

NAME = "tf_stepstats"
DESCRIPTION = "TensorFlow RunMetadata / StepStats (text or binary protobuf, optionally gzipped)"

# Text format: optional comments/blank lines, then the first field of RunMetadata or StepStats.
_TEXT_COMMENTS = re.compile(r"\A(?:\s|#[^\n]*(?:\n|\Z))*")
_TEXT_START = re.compile(r"(step_stats|dev_stats)\s*:?\s*[{<]")

# Label `[alloc summary] name = Op(in1, in2, ^ctrl)`; the bracket prefix is TF's memory note.
_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)?(?P<name>\S+) = (?P<op>[^(\s]+)\((?P<args>.*)\)\s*$", re.S)
_COPY = re.compile(r"^(?P<kind>MEMCPY|MEMSET)(?P<dir>[A-Z]to[A-Z])?")
_BYTES = re.compile(r"(\d+) bytes")
# Legacy device names (`/job:x/replica:0/task:0/gpu:0`, `/gpu:0/stream:3`) that
# tracedb.devices does not know.
_LEGACY_DEV = re.compile(r"/(?P<type>cpu|gpu|tpu):(?P<index>\d+)(?:/stream:(?P<stream>\w+))?(?P<memcpy>/memcpy)?", re.I)

_INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------- sniffing


def _varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """Decode a protobuf varint at pos -> (value, next pos), None if cut or too long."""
    value = shift = 0
    while pos < len(buf) and shift < 64:
        b = buf[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return value, pos
        shift += 7
    return None


def _binary_depth(head: bytes) -> int | None:
    """Number of nested `field 1, length-delimited` headers before the first device string.

    StepStats -> dev_stats -> device is 2 deep, RunMetadata -> step_stats -> dev_stats ->
    device is 3 deep. Each inner length must fit in its parent and the device string
    must look like a TF device (`/...:...`, printable). None when it is neither.
    """
    pos, limit = 0, None
    for depth in (1, 2, 3):
        if pos >= len(head) or head[pos] != 0x0A:
            return None
        got = _varint(head, pos + 1)
        if got is None:
            return None
        length, pos = got
        if length == 0 or (limit is not None and pos + length > limit):
            return None
        limit = pos + length
        if depth >= 2 and head[pos : pos + 1] == b"/":
            dev = head[pos : min(limit, len(head))]
            if 2 <= length <= 512 and b":" in dev and all(0x20 < c < 0x7F for c in dev):
                return depth
            return None
    return None


def _text_kind(head: bytes) -> str | None:
    """'step_stats' (RunMetadata) or 'dev_stats' (StepStats) for text format, else None."""
    text = text_head(head)
    if not text:
        return None
    m = _TEXT_START.match(text, _TEXT_COMMENTS.match(text).end())
    return m.group(1) if m else None


def sniff(head: bytes) -> bool:
    return _text_kind(head) is not None or _binary_depth(head) is not None


# ---------------------------------------------------------------- parsing


def _parse(data: bytes) -> step_stats_pb2.StepStats:
    kind = _text_kind(data[:HEAD_BYTES])
    if kind is not None:
        msg = run_metadata_pb2.RunMetadata() if kind == "step_stats" else step_stats_pb2.StepStats()
        try:
            # Unknown fields (newer TF, graphs in the placeholders) are skipped, not errors.
            text_format.Parse(data.decode("utf-8"), msg, allow_unknown_field=True)
        except (text_format.ParseError, UnicodeDecodeError) as e:
            raise TraceFormatError(f"bad or truncated TF text protobuf: {e}") from e
    else:
        depth = _binary_depth(data[:HEAD_BYTES])
        if depth is None:
            raise TraceFormatError("not a TF RunMetadata/StepStats protobuf")
        msg = run_metadata_pb2.RunMetadata() if depth == 3 else step_stats_pb2.StepStats()
        try:
            # A cut inside any length-delimited field fails here; a RunMetadata has one
            # top-level field, so any truncation inside its step_stats is caught.
            msg.ParseFromString(data)
        except DecodeError as e:
            raise TraceFormatError(f"bad or truncated TF binary protobuf: {e}") from e
    stats = msg.step_stats if isinstance(msg, run_metadata_pb2.RunMetadata) else msg
    if not any(d.node_stats for d in stats.dev_stats):
        raise TraceFormatError("TF step stats have no node_stats")
    return stats


def _device(raw: str) -> tuple[str, str | None]:
    """(canonical device, stream tag) as in tracedb.devices, plus legacy `/gpu:0` names."""
    dev, stream = devices.parse_tf_device(raw)
    if dev != raw:
        return dev, stream
    m = _LEGACY_DEV.search(raw)
    if m:
        return devices.canonical(m["type"], m["index"]), "memcpy" if m["memcpy"] else m["stream"]
    return devices.normalize(raw), None


def _ns(node: Any, field: str) -> int:
    """`<field>_nanos` when set, else `<field>_micros` * 1000 (TF writes both when it can)."""
    nanos = getattr(node, field + "_nanos")
    return nanos if nanos else getattr(node, field + "_micros") * 1000


def _dtype(value: int) -> str | None:
    """DT_FLOAT -> float32, DT_HALF_REF -> float16_ref (TF's Python names)."""
    try:
        name = types_pb2.DataType.Name(value)
    except ValueError:
        return f"dtype_{value}"
    if name == "DT_INVALID":
        return None
    name = name[3:].lower()
    ref = name.endswith("_ref")
    base = name[:-4] if ref else name
    base = {"float": "float32", "double": "float64", "half": "float16"}.get(base, base)
    return base + ("_ref" if ref else "")


def _shape(shape: Any) -> list[int] | None:
    return None if shape.unknown_rank else [d.size for d in shape.dim]


def _label(label: str) -> tuple[str | None, list[str] | None, list[str] | None]:
    """`name = Op(a, ^b)` -> ('Op', ['a'], ['b']); (None, None, None) without `=`."""
    m = _LABEL.match(label)
    if not m:
        return None, None, None
    args = [a.strip() for a in m["args"].split(",") if a.strip()]
    return m["op"], [a for a in args if not a.startswith("^")], [a[1:] for a in args if a.startswith("^")]


def _json(d: dict[str, Any]) -> str | None:
    d = {k: v for k, v in d.items() if v not in (None, "", [], {})}
    return json.dumps(d, sort_keys=True) if d else None


def _int64(v: int) -> int | None:
    return v if v <= _INT64_MAX else None


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    stats = _parse(read_all(path))
    nodes, kernels = BatchBuilder("nodes"), BatchBuilder("kernels")
    tensors, allocs = BatchBuilder("tensors"), BatchBuilder("allocations")
    step, seq = ctx.file_ordinal, 0
    for dev_stats in stats.dev_stats:
        raw = dev_stats.device
        dev, stream = _device(raw)
        if stream in ("all", "memcpy"):
            continue  # repeats of numbered-stream rows
        common = {"device": dev, "device_raw": raw, "step": step}
        for ns in dev_stats.node_stats:
            start = _ns(ns, "all_start")
            if stream is not None and stream.isdigit():
                yield from kernels.append(_kernel_row(ns, start, int(stream), common))
                continue
            # Any other device (normally /job:...) holds framework ops.
            yield from nodes.append(_node_row(ns, start, seq, dev_stats, common))
            seq += 1
            for out in ns.output:
                yield from tensors.append(_tensor_row(ns.node_name, out, common))
            for mem in ns.memory:
                for rec in mem.allocation_records:
                    yield from allocs.append({
                        **common,
                        "allocator": mem.allocator_name or None,
                        "node_name": ns.node_name,
                        "ts_ns": rec.alloc_micros * 1000,
                        "bytes": rec.alloc_bytes,
                        "kind": "free" if rec.alloc_bytes < 0 else "alloc",
                    })
    for b in (nodes, kernels, tensors, allocs):
        yield from b.flush()


def _node_row(ns: Any, start: int, seq: int, dev_stats: Any, common: dict) -> dict[str, Any]:
    op_type, inputs, control = _label(ns.timeline_label)
    outs = sorted(ns.output, key=lambda o: o.slot)
    mem = ns.memory_stats if ns.HasField("memory_stats") else None
    scheduled = _ns(ns, "scheduled")
    params = {
        "thread_name": dev_stats.thread_names.get(ns.thread_id) if ns.thread_id else None,
        "memory": [
            {k: getattr(m, k) for k in ("allocator_name", "total_bytes", "peak_bytes",
                                        "live_bytes", "allocator_bytes_in_use") if getattr(m, k)}
            for m in ns.memory
        ],
        "referenced_tensors": len(ns.referenced_tensor) or None,
    }
    return {
        **common,
        "node_name": ns.node_name,
        "op_type": op_type,
        "start_ns": start,
        "duration_ns": _ns(ns, "all_end_rel"),
        "thread_id": ns.thread_id or None,  # 0 = not recorded
        "seq": seq,
        "op_start_ns": start + _ns(ns, "op_start_rel"),
        "op_end_ns": start + _ns(ns, "op_end_rel"),
        "scheduled_ns": scheduled or None,
        "timeline_label": ns.timeline_label or None,
        "inputs": inputs,
        "control_inputs": control or None,
        "outputs": [f"{ns.node_name}:{o.slot}" for o in outs] or None,
        "output_shapes": [_shape(o.tensor_description.shape) for o in outs] or None,
        "output_dtypes": [_dtype(o.tensor_description.dtype) for o in outs] or None,
        "temp_memory_bytes": mem.temp_memory_size if mem else None,
        "persistent_memory_bytes": mem.persistent_memory_size if mem else None,
        "params": _json(params),
    }


def _kernel_row(ns: Any, start: int, stream: int, common: dict) -> dict[str, Any]:
    # Stream rows are named `op/name:KernelName`; TF node names never contain ':', kernel
    # names may (`void foo::bar<...>`), so split at the first one.
    node_name, sep, name = ns.node_name.partition(":")
    if not sep:
        node_name, name = None, ns.node_name
    label = ns.timeline_label
    m = _COPY.match(label) or _COPY.match(name)
    kind = {"MEMCPY": "memcpy", "MEMSET": "memset"}[m["kind"]] if m else "kernel"
    nbytes = _BYTES.search(label) if m else None
    return {
        **common,
        "stream": stream,
        "kind": kind,
        "name": name,
        "node_name": node_name,
        "start_ns": start,
        "duration_ns": _ns(ns, "all_end_rel"),
        "bytes": int(nbytes.group(1)) if nbytes else None,
        "copy_kind": m["dir"] if m and kind == "memcpy" else None,
        "params": _json({"timeline_label": label}),
    }


def _tensor_row(node_name: str, out: Any, common: dict) -> dict[str, Any]:
    td = out.tensor_description
    ad = td.allocation_description if td.HasField("allocation_description") else None
    return {
        **common,
        "node_name": node_name,
        "slot": out.slot,
        "dtype": _dtype(td.dtype),
        "shape": _shape(td.shape),
        "requested_bytes": ad.requested_bytes if ad else None,
        "allocated_bytes": ad.allocated_bytes if ad else None,
        "allocator": (ad.allocator_name or None) if ad else None,
        "allocation_id": ad.allocation_id if ad else None,
        "ptr": _int64(ad.ptr) if ad and ad.ptr else None,
        "params": _json({"has_single_reference": True}) if ad and ad.has_single_reference else None,
    }
