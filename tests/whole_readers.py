"""Regression check, not an oracle: the whole-document readers the streaming ones
replaced (issue 13), tracedb's own past code, kept to check that streaming changed nothing
(tests/test_streaming.py) and to measure what it costs (bench/bench_stream.py). They share
the readers' row code, so they cannot catch a wrong row both compute. The oracles from
the raw files are elsewhere: tests/rawtrace.py's text parser and grep counts for the TF
text and binary traces (tests/test_format_tf_stepstats.py, tests/test_pbtext*.py), a
hand wire-format walk for XSpace (tests/test_format_xspace.py), plain `json` for
MegEngine (tests/test_format_megengine.py, tests/test_queries_megengine.py).

- `whole_protobuf()`: while active, `pbwire.index` / `pbwire.stream` parse the whole
  file with `ParseFromString` and hand out its messages (streamed elements as a Spec's
  `elements` class reads them: XSpace events with raw stats), so the TF binary and XSpace
  readers run their row code on what protobuf itself parsed.
- `whole_tf_text()`: while active, the TF text reader decodes the whole file into one
  string and hands it to `pbtext` at once, as it did before it read in chunks.
- `megengine_whole`: the MegEngine reader before streaming, verbatim (`json.loads`) but
  for the two columns the FLOPs feature added since (input_dtypes, kernels.node_seq).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from tracedb.devices import normalize
from tracedb.errors import TraceFormatError
from tracedb.formats import pbwire, tf_stepstats
from tracedb.formats.base import BatchBuilder, ReadContext, read_all
from tracedb.formats.megengine import _int_id, _ns, _var_dtype, _var_shape


def _whole_index(f: Any, spec: pbwire.Spec, what: str) -> pbwire.Node:
    return _tree(spec.cls.FromString(f.read()), spec, spec.name)


def _tree(msg: Any, spec: pbwire.Spec, path: str) -> pbwire.Node:
    node = pbwire.Node(path, msg)  # the whole message: its other fields are all there
    for fn, sub in spec.nested.items():
        name = spec.cls.DESCRIPTOR.fields_by_number[fn].name
        value = getattr(msg, name)
        items = list(value) if spec.cls.DESCRIPTOR.fields_by_number[fn].is_repeated else (
            [value] if msg.HasField(name) else [])
        node.children += [_tree(m, sub, f"{path + '.' if path else ''}{sub.name}[{i}]") for i, m in enumerate(items)]
    if spec.stream:
        node.count = len(getattr(msg, spec.stream[1]))
    node.spec = spec
    return node


def _whole_stream(f: Any, spec: pbwire.Spec, tree: pbwire.Node, what: str, want: Any = None) -> Iterator[tuple]:
    if spec.stream and tree.count and (want is None or want(tree)):
        elements = getattr(tree.header, spec.stream[1])
        if spec.elements is not None:  # the same elements as the reader's lighter class sees them
            elements = pbwire.Run(getattr(spec.elements.FromString(tree.header.SerializeToString()), spec.stream[1]),
                                  lambda: None)
        yield tree, elements
    for child in tree.children:
        yield from _whole_stream(f, child.spec, child, what, want)


@contextlib.contextmanager
def whole_protobuf() -> Iterator[None]:
    saved = pbwire.index, pbwire.stream
    pbwire.index, pbwire.stream = _whole_index, _whole_stream
    try:
        yield
    finally:
        pbwire.index, pbwire.stream = saved


def _whole_text_chunks(path: Path) -> str:
    """The reader's text as it was: `read_all` then one decode (a str: pbtext reads it as
    one piece)."""
    data = read_all(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"bad or truncated TF text protobuf: {e}") from e


@contextlib.contextmanager
def whole_tf_text() -> Iterator[None]:
    saved = tf_stepstats._text_chunks
    tf_stepstats._text_chunks = _whole_text_chunks
    try:
        yield
    finally:
        tf_stepstats._text_chunks = saved


def _section(obj: dict, key: str, path: str) -> dict:
    val = obj.get(key)
    if not isinstance(val, dict):
        raise TraceFormatError(f"MegEngine profile: '{path}{key}' is missing or not an object")
    return val


def megengine_whole(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The MegEngine reader as it was: `json.loads` of the whole document."""
    try:
        doc = json.loads(read_all(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceFormatError(f"MegEngine profile is not valid JSON: {e}") from e
    except RecursionError:
        raise TraceFormatError("MegEngine profile: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise TraceFormatError("MegEngine profile: top level is not a JSON object")
    prof = _section(doc, "profiler", "")
    gexec = _section(doc, "graph_exec", "")
    operators = _section(gexec, "operator", "graph_exec.")
    variables = gexec.get("var") or {}
    chunks = gexec.get("mem_chunk") or {}
    host = prof.get("host") or {}
    device = prof.get("device") or {}
    footprint = prof.get("opr_footprint") or {}
    seq_of = {str(opr): i for i, opr in enumerate(gexec.get("comp_seq") or [])}

    var_name = {vid: v.get("name") for vid, v in variables.items()}
    owner: dict[str, tuple[str, int]] = {}  # var id -> (operator name, output slot)

    where = "graph_exec"  # the entry being read, for the error message
    try:
        nodes = BatchBuilder("nodes")
        kernels = BatchBuilder("kernels")
        for oid, op in operators.items():
            where = f"operator {oid}"
            name, typ = op["name"], op.get("type")
            ins = [str(v) for v in op.get("input") or []]
            outs = [str(v) for v in op.get("output") or []]
            for slot, v in enumerate(outs):
                owner[v] = (name, slot)

            timings = device.get(oid) or {}
            # The op's device: where it was profiled, else where its first output lives.
            dev_raw = next(iter(timings), None)
            if dev_raw is None and outs:
                dev_raw = (variables.get(outs[0]) or {}).get("comp_node")
            dev = normalize(dev_raw)

            row: dict[str, Any] = {
                "device": dev, "device_raw": dev_raw, "node_name": name, "op_type": typ,
                "seq": seq_of.get(oid), "inputs": [var_name.get(v, v) for v in ins],
                "outputs": [var_name.get(v, v) for v in outs],
                # Added with the FLOPs feature (tracedb.flops, after this reader was frozen):
                # the inputs' dtypes, and the kernels' node_seq below.
                "input_dtypes": [_var_dtype(variables.get(v) or {}) for v in ins],
            }
            params: dict[str, Any] = {"id": oid, "input_vars": ins, "output_vars": outs}
            host_t = host.get(oid) or {}
            if host_t:
                # One entry per host thread (normally just "interpreter"): span them all.
                start = min(_ns(t["start"]) for t in host_t.values())
                row["start_ns"] = start
                row["duration_ns"] = max(_ns(t["end"]) for t in host_t.values()) - start
                params["host_threads"] = list(host_t)
                kerns = [_ns(t["kern"]) for t in host_t.values() if "kern" in t]
                params["host_kern_ns"] = min(kerns) if kerns else None
            fp = footprint.get(oid)
            if fp is not None:
                row["flops"] = fp.get("computation")
                row["memory_bytes"] = fp.get("memory")
                row["input_shapes"] = fp.get("in_shapes")
                row["output_shapes"] = fp.get("out_shapes")
                if fp.get("param"):
                    params["param"] = fp["param"]
            else:  # not profiled: shapes the graph inferred for its vars
                row["input_shapes"] = [s for v in ins if (s := _var_shape(variables.get(v) or {})) is not None]
                row["output_shapes"] = [s for v in outs if (s := _var_shape(variables.get(v) or {})) is not None]
            if op.get("extra"):
                params["extra"] = op["extra"]
            row["params"] = json.dumps(params)
            nodes.add(row)

            for comp_node, t in timings.items():
                start = _ns(t["start"])
                kernels.add({
                    "device": normalize(comp_node), "device_raw": comp_node, "kind": "kernel",
                    "name": typ, "node_name": name, "start_ns": start,
                    "duration_ns": _ns(t["end"]) - start,
                    "kern_ns": _ns(t["kern"]) if "kern" in t else None, "node_seq": row["seq"],
                    "params": json.dumps({"operator_id": oid}),
                })
        yield from nodes.flush()
        yield from kernels.flush()

        tensors = BatchBuilder("tensors")
        for vid, var in variables.items():
            where = f"var {vid}"
            comp_node = var.get("comp_node")
            plan = var.get("mem_plan") or {}
            chunk_id = plan.get("mem_chunk_id")
            chunk = chunks.get(chunk_id) if chunk_id else None
            op_name, slot = owner.get(vid, (None, None))
            params = {"flags": var.get("flag") or []}
            if chunk_id:
                params["mem_chunk_id"] = chunk_id
                params["offset_byte"] = plan.get("offset_byte")
            tensors.add({
                "device": normalize(comp_node), "device_raw": comp_node, "node_name": op_name,
                "slot": slot, "tensor_name": var.get("name"), "tensor_id": _int_id(vid),
                "dtype": _var_dtype(var), "shape": _var_shape(var),
                "allocated_bytes": chunk.get("size") if chunk else None,
                "allocation_id": _int_id(chunk_id[3:]) if chunk_id and chunk_id.startswith("chk") else None,
                "allocator": comp_node if chunk else None, "ptr": var.get("dev_ptr"),
                "params": json.dumps(params),
            })
        yield from tensors.flush()

        allocations = BatchBuilder("allocations")
        for cid, chunk in chunks.items():
            where = f"mem_chunk {cid}"
            ovar = str(chunk.get("owner_var"))
            comp_node = (variables.get(ovar) or {}).get("comp_node")
            allocations.add({
                "device": normalize(comp_node), "device_raw": comp_node, "allocator": comp_node,
                "node_name": var_name.get(ovar, ovar), "ts_ns": None, "bytes": chunk["size"],
                "address": chunk.get("dev_ptr"), "kind": "chunk",
                "params": json.dumps({"chunk_id": cid, "owner_var": ovar,
                                      "owner_operator": owner.get(ovar, (None,))[0]}),
            })
        yield from allocations.flush()
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise TraceFormatError(f"MegEngine profile: malformed {where} ({type(e).__name__}: {e})") from e
