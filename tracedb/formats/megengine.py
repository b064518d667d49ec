"""MegEngine graph-profile JSON (`profiler` + `graph_exec`, as written by `mge.utils.profiler`).

Layout of the source (every map is keyed by the operator / var id as a string):

    profiler.host[opr]          {thread: {start, kern, end}}     seconds, host clock
    profiler.device[opr]        {comp_node: {start, kern, end}}  seconds, device clock
    profiler.opr_footprint[opr] {computation (FLOPs), memory (bytes moved), in_shapes, out_shapes, param}
    graph_exec.operator[opr]    {id, name, type, input: [var], output: [var], extra}
    graph_exec.var[var]         {id, name, comp_node, dev_ptr, mem_plan{layout{dtype, shape}, mem_chunk_id},
                                 static_infer_tags.SHAPE.inferred_result, flag}
    graph_exec.mem_chunk[chk]   {id, owner_var, size, dev_ptr}
    graph_exec.comp_seq         [opr]  execution order

Rows:
- `nodes`: one per operator; `seq` is its position in comp_seq (NULL when it is not in
  the sequence), start/duration from the host timing (NULL when the operator was not
  profiled), flops / memory_bytes / shapes from the footprint. `inputs`/`outputs` are
  var names (ids are in `params`).
- `kernels`: one per (operator, comp node) device timing, kind `kernel`. `name` is the
  operator *type* (ConvolutionForward, Elemwise, ...): operator names are unique per
  graph, so only the type lets `top_kernels` aggregate repeated work; `node_name` is the
  operator name.
- `tensors`: one per var, `node_name` = the operator that outputs it, `slot` its index.
- `allocations`: one per planned memory chunk, kind `chunk`, `node_name` = owner var
  name, `allocator` = owner var's comp node, `ts_ns` NULL (a plan has no time).

Streaming: `jsonstream.ObjectStream` walks the document and decodes each entry three
levels down (`profiler.host.<opr>`) alone, so no JSON object of the document is kept.
Rows join the whole graph (an operator's row needs its timings, footprint, seq and var
names; a var's needs its owner operator), so what is kept is one compact record (tuples)
per operator timing, footprint, var and chunk: memory grows with the graph, not with the
bytes; whitespace or unknown sections cost nothing. A 77.8 MB profile (the seed's graph
copied 200 times): peak RSS 311 MB vs 527 MB for the `json.loads` reader (173 vs 522 MB
with 2048-row batches), CPU 0.83-0.93x; +7 ms on the 382 KB seed (1.5x;
bench/bench_stream.py). Operators become rows as they stream by once the sections they
need are complete (MegEngine writes them last); met earlier, they wait.

Why jsonstream and not ijson: on that 77.8 MB profile the walk takes 1.29 s CPU;
ijson 3.6 (yajl2_c backend) takes 6.03 s with `kvitems` (one pass per section, 4.7x), and
1.57 s just to produce its raw parse events (1.2x) before any object is built.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from tracedb.devices import normalize
from tracedb.errors import TraceFormatError
from tracedb.formats import jsonstream
from tracedb.formats.base import BatchBuilder, ReadContext, flush, text_head

NAME = "megengine"
DESCRIPTION = "MegEngine graph profile JSON (profiler + graph_exec)"

# The head must open a JSON object and show one of the two top-level sections with one of
# its known sub-keys: specific enough never to match Kineto / Chrome trace JSON.
_SNIFF = re.compile(
    r'"profiler"\s*:\s*\{\s*"(?:opr_internal_pf|host|device|opr_footprint)"'
    r'|"graph_exec"\s*:\s*\{\s*"(?:operator|var|mem_chunk|comp_seq)"'
)


def sniff(head: bytes) -> bool:
    text = text_head(head).lstrip()
    return text.startswith("{") and _SNIFF.search(text) is not None


def _ns(seconds: Any) -> int:
    return round(float(seconds) * 1e9)


def _int_id(s: Any) -> int | None:
    return int(s) if isinstance(s, str) and s.isdigit() else (s if isinstance(s, int) else None)


def _var_shape(var: dict) -> list[int] | None:
    plan = var.get("mem_plan") or {}
    shape = (plan.get("layout") or {}).get("shape")
    if shape is None:
        shape = (((var.get("static_infer_tags") or {}).get("SHAPE")) or {}).get("inferred_result")
    return shape if isinstance(shape, list) else None


def _var_dtype(var: dict) -> str | None:
    dtype = (((var.get("mem_plan") or {}).get("layout")) or {}).get("dtype")
    return dtype.lower() if isinstance(dtype, str) else None  # Float32 -> float32, like other formats


# Each table's columns, in the schema's order (a row is a tuple of them: no dict per row).
_NODE_COLS = ("device", "device_raw", "node_name", "op_type", "start_ns", "duration_ns", "seq", "inputs", "outputs",
              "input_shapes", "input_dtypes", "output_shapes", "flops", "memory_bytes", "params")
_KERNEL_COLS = ("device", "device_raw", "kind", "name", "node_name", "start_ns", "duration_ns", "kern_ns", "params",
                "node_seq")
_TENSOR_COLS = ("device", "device_raw", "node_name", "slot", "tensor_name", "tensor_id", "dtype", "shape",
                "allocated_bytes", "allocator", "allocation_id", "ptr", "params")
_ALLOCATION_COLS = ("device", "device_raw", "allocator", "node_name", "ts_ns", "bytes", "address", "kind", "params")
_JSON_ERROR = re.compile(r"(invalid|truncated) JSON|not UTF-8|empty file")
_MISSING = object()
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, OverflowError)
# The sections an operator's rows need: operators are turned into rows once these are
# complete (they come first in MegEngine's own files), and held until then otherwise.
_NEEDED = (("profiler",), ("graph_exec", "var"), ("graph_exec", "comp_seq"))
_MAPS = {("profiler", "host"), ("profiler", "device"), ("profiler", "opr_footprint"),
         ("graph_exec", "operator"), ("graph_exec", "var"), ("graph_exec", "mem_chunk")}


class _Graph:
    """What rows need from the sections, one compact record per operator / var / chunk
    (no JSON objects kept): filled entry by entry as the document streams by."""

    def __init__(self) -> None:
        self.host: dict[str, tuple | None] = {}  # oid -> (start_ns, duration_ns, threads, kern_ns)
        self.device: dict[str, list[tuple]] = {}  # oid -> [(comp_node, start_ns, duration_ns, kern_ns)]
        self.footprint: dict[str, tuple] = {}  # oid -> (flops, memory, in_shapes, out_shapes, param)
        self.vars: dict[str, tuple] = {}  # vid -> (name, comp_node, shape, dtype, chunk_id, offset, flags, ptr)
        self.chunks: dict[str, tuple | None] = {}  # cid -> (size, owner var, dev_ptr); None: empty
        self.seq_of: dict[str, int] = {}
        self.owner: dict[str, tuple[str, int]] = {}  # var id -> (operator name, output slot)
        self.objects: set[tuple] = set()  # containers met as JSON objects
        self.closed: set[tuple] = set()
        self._devices: dict[str, str] = {}

    def device_of(self, raw: Any) -> str:
        """`devices.normalize(raw)`, once per distinct comp node name."""
        if type(raw) is not str:
            return normalize(raw)
        dev = self._devices.get(raw)
        if dev is None:
            dev = self._devices[raw] = normalize(raw)
        return dev

    def final(self, path: tuple) -> bool:
        return path in self.closed or path[:1] in self.closed

    def add(self, section: tuple, key: Any, value: Any) -> None:
        if section == ("graph_exec", "comp_seq"):  # a list (or, oddly, an object: its keys)
            self.seq_of[str(key if isinstance(key, str) else value)] = len(self.seq_of)
            return
        kind = section[1]
        try:
            if kind == "host":
                self.host[key] = _host(value) if value else None
            elif kind == "device":
                self.device[key] = [_timing(c, t) for c, t in (value or {}).items()]
            elif kind == "opr_footprint":
                self.footprint[key] = None if value is None else (
                    value.get("computation"), value.get("memory"), value.get("in_shapes"),
                    value.get("out_shapes"), value.get("param") or None)
            elif kind == "var":
                self.vars[key] = _var(value) if value else _EMPTY_VAR
            elif kind == "mem_chunk":
                self.chunks[key] = (value.get("size", _MISSING), value.get("owner_var"),
                                    value.get("dev_ptr")) if value else None
        except _MALFORMED as e:
            what = "operator" if section[0] == "profiler" else kind
            raise TraceFormatError(f"MegEngine profile: malformed {what} {key} ({type(e).__name__}: {e})") from e


_EMPTY_VAR = (None,) * 6 + ([], None)


def _host(t: dict) -> tuple:
    """One entry per host thread (normally just "interpreter"): span them all."""
    start = min(_ns(x["start"]) for x in t.values())
    kerns = [_ns(x["kern"]) for x in t.values() if "kern" in x]
    return start, max(_ns(x["end"]) for x in t.values()) - start, list(t), min(kerns) if kerns else None


def _timing(comp_node: str, t: dict) -> tuple:
    start = _ns(t["start"])
    return comp_node, start, _ns(t["end"]) - start, _ns(t["kern"]) if "kern" in t else None


def _var(var: dict) -> tuple:
    plan = var.get("mem_plan") or {}
    return (var.get("name"), var.get("comp_node"), _var_shape(var), _var_dtype(var),
            plan.get("mem_chunk_id"), plan.get("offset_byte"), var.get("flag") or [], var.get("dev_ptr"))


def _entries(path: Path) -> Iterator[tuple[tuple, Any]]:
    """The document's entries three levels down (`profiler.host.<opr>`), each decoded alone."""
    it = iter(jsonstream.ObjectStream(path, depth=3))
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except TraceFormatError as e:
            if not _JSON_ERROR.match(str(e)):  # the limit, a corrupt gzip: as they are
                raise
            msg = re.sub(r"^invalid JSON:? ", "", str(e))
            raise TraceFormatError(f"MegEngine profile is not valid JSON: {msg}") from e
        yield item


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Stream the document (`jsonstream.ObjectStream`), keeping compact records of the
    profiler and graph sections; operators become node and kernel rows as they stream by,
    vars and chunks become tensor and allocation rows at the end."""
    g = _Graph()
    nodes, kernels = BatchBuilder("nodes", columns=_NODE_COLS), BatchBuilder("kernels", columns=_KERNEL_COLS)
    pending: list[tuple[str, Any]] = []  # operators met before the sections they need
    for p, value in _entries(path):
        if len(p) == 3:
            if p[:2] == ("graph_exec", "operator"):
                if p[:2] not in g.objects:
                    continue  # not an object: the error comes at the end
                pending.append((p[2], value))
                if all(g.final(s) for s in _NEEDED):
                    for oid, op in pending:
                        yield from _operator(g, oid, op, nodes, kernels)
                    pending.clear()
            elif p[:2] in _MAPS and p[:2] in g.objects or p[:2] == ("graph_exec", "comp_seq"):
                g.add(p[:2], p[2], value)
        elif value is jsonstream.OBJECT:
            g.objects.add(p)
        elif value is jsonstream.END:
            g.closed.add(p)
        elif not p:
            raise TraceFormatError("MegEngine profile: top level is not a JSON object")
        elif p in _MAPS and value and value is not jsonstream.ARRAY:  # a non-object where a map belongs
            raise TraceFormatError(f"MegEngine profile: '{'.'.join(p)}' is not an object")
    for name in ("profiler", "graph_exec"):
        if (name,) not in g.objects:
            raise TraceFormatError(f"MegEngine profile: '{name}' is missing or not an object")
    if ("graph_exec", "operator") not in g.objects:
        raise TraceFormatError("MegEngine profile: 'graph_exec.operator' is missing or not an object")
    for oid, op in pending:
        yield from _operator(g, oid, op, nodes, kernels)
    yield from flush(nodes, kernels)
    yield from _tensors(g)
    yield from _allocations(g)


def _operator(g: _Graph, oid: str, op: Any, nodes: BatchBuilder, kernels: BatchBuilder) -> Iterator[tuple[str, pa.RecordBatch]]:
    try:
        node, kerns = _operator_rows(g, oid, op)
    except _MALFORMED as e:
        raise TraceFormatError(f"MegEngine profile: malformed operator {oid} ({type(e).__name__}: {e})") from e
    yield from nodes.append(node)
    for k in kerns:
        yield from kernels.append(k)


def _operator_rows(g: _Graph, oid: str, op: dict) -> tuple[tuple, list[tuple]]:
    """An operator's node row and its kernel rows (`_NODE_COLS`, `_KERNEL_COLS`)."""
    name, typ = op["name"], op.get("type")
    ins = [str(v) for v in op.get("input") or []]
    outs = [str(v) for v in op.get("output") or []]
    for slot, v in enumerate(outs):
        g.owner[v] = (name, slot)
    timings = g.device.get(oid) or []
    # The op's device: where it was profiled, else where its first output lives.
    dev_raw = timings[0][0] if timings else None
    if dev_raw is None and outs:
        dev_raw = g.vars.get(outs[0], _EMPTY_VAR)[1]
    var_name = lambda v: g.vars[v][0] if v in g.vars else v  # noqa: E731
    seq = g.seq_of.get(oid)
    params: dict[str, Any] = {"id": oid, "input_vars": ins, "output_vars": outs}
    start = duration = flops = memory = None
    host = g.host.get(oid)
    if host:
        start, duration, params["host_threads"], params["host_kern_ns"] = host
    fp = g.footprint.get(oid)
    if fp is not None:
        flops, memory, in_shapes, out_shapes, param = fp
        if param:
            params["param"] = param
    else:  # not profiled: shapes the graph inferred for its vars
        in_shapes = [s for v in ins if (s := g.vars.get(v, _EMPTY_VAR)[2]) is not None]
        out_shapes = [s for v in outs if (s := g.vars.get(v, _EMPTY_VAR)[2]) is not None]
    if op.get("extra"):
        params["extra"] = op["extra"]
    node = (g.device_of(dev_raw), dev_raw, name, typ, start, duration, seq, [var_name(v) for v in ins],
            [var_name(v) for v in outs], in_shapes,
            [g.vars.get(v, _EMPTY_VAR)[3] for v in ins],  # the FLOPs' precision (tracedb.flops)
            out_shapes, flops, memory, jsonstream.dumps(params))
    kerns = [(g.device_of(comp_node), comp_node, "kernel", typ, name, start, dur, kern,
              jsonstream.dumps({"operator_id": oid}), seq) for comp_node, start, dur, kern in timings]
    return node, kerns


def _tensors(g: _Graph) -> Iterator[tuple[str, pa.RecordBatch]]:
    tensors = BatchBuilder("tensors", columns=_TENSOR_COLS)
    for vid, (name, comp_node, shape, dtype, chunk_id, offset, flags, ptr) in g.vars.items():
        try:
            chunk = g.chunks.get(chunk_id) if chunk_id else None
            op_name, slot = g.owner.get(vid, (None, None))
            params = {"flags": flags}
            if chunk_id:
                params["mem_chunk_id"] = chunk_id
                params["offset_byte"] = offset
            size = chunk[0] if chunk else None
            row = (g.device_of(comp_node), comp_node, op_name, slot, name, _int_id(vid), dtype, shape,
                   None if size is _MISSING else size, comp_node if chunk else None,
                   _int_id(chunk_id[3:]) if chunk_id and chunk_id.startswith("chk") else None, ptr,
                   jsonstream.dumps(params))
        except _MALFORMED as e:
            raise TraceFormatError(f"MegEngine profile: malformed var {vid} ({type(e).__name__}: {e})") from e
        yield from tensors.append(row)
    yield from tensors.flush()


def _allocations(g: _Graph) -> Iterator[tuple[str, pa.RecordBatch]]:
    allocations = BatchBuilder("allocations", columns=_ALLOCATION_COLS)
    for cid, chunk in g.chunks.items():
        size, owner_var, ptr = chunk or (_MISSING, None, None)
        ovar = str(owner_var)
        if size is _MISSING:
            raise TraceFormatError(f"MegEngine profile: malformed mem_chunk {cid} (KeyError: 'size')")
        comp_node = g.vars.get(ovar, _EMPTY_VAR)[1]
        yield from allocations.append((
            g.device_of(comp_node), comp_node, comp_node, g.vars[ovar][0] if ovar in g.vars else ovar, None, size,
            ptr, "chunk", jsonstream.dumps({"chunk_id": cid, "owner_var": ovar,
                                      "owner_operator": g.owner.get(ovar, (None,))[0]})))
    yield from allocations.flush()
