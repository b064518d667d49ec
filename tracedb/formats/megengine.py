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
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from tracedb.devices import normalize
from tracedb.errors import TraceFormatError
from tracedb.formats.base import BatchBuilder, ReadContext, read_all, text_head

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


def _section(obj: dict, key: str, path: str) -> dict:
    val = obj.get(key)
    if not isinstance(val, dict):
        raise TraceFormatError(f"MegEngine profile: '{path}{key}' is missing or not an object")
    return val


def _var_shape(var: dict) -> list[int] | None:
    plan = var.get("mem_plan") or {}
    shape = (plan.get("layout") or {}).get("shape")
    if shape is None:
        shape = (((var.get("static_infer_tags") or {}).get("SHAPE")) or {}).get("inferred_result")
    return shape if isinstance(shape, list) else None


def _var_dtype(var: dict) -> str | None:
    dtype = (((var.get("mem_plan") or {}).get("layout")) or {}).get("dtype")
    return dtype.lower() if isinstance(dtype, str) else None  # Float32 -> float32, like other formats


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
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
                    "kern_ns": _ns(t["kern"]) if "kern" in t else None,
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
