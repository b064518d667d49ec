"""The TF StepStats reader's every column against an oracle written straight from the
protobuf messages (`text_format.Parse` / `FromString`, plain Python, `json.dumps` for the
params), on both TF fixtures (text, and binary made from them) and on a synthetic trace of
the edge cases: nanos beside micros, times past 2^53 ns, outputs out of slot order, thread
names (non-ASCII), memory entries with zero fields, allocation records, referenced
tensors, copies on streams, `/stream:all` and `/memcpy` (repeats, skipped). It shares no
code with the reader (which reads a run of nodes a column at a time, issue 29)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf import text_format

from conftest import DATA
from tracedb.formats import tf_stepstats
from tracedb.formats.base import ReadContext
from tracedb.proto import run_metadata_pb2, step_stats_pb2, types_pb2

STEP = 7  # the file's ordinal: a TF RunMetadata file is one step

_DEV = re.compile(r"/device:([A-Z]+):(\d+)(?:/stream:(\w+)|(/memcpy))?$")
_COPY_DIR = {"HtoD": "HtoD", "DtoH": "DtoH", "DtoD": "DtoD", "HtoH": "HtoH"}


def _ns(msg, field: str) -> int:
    return getattr(msg, field + "_nanos") or getattr(msg, field + "_micros") * 1000


def _dtype(v: int):
    name = types_pb2.DataType.Name(v)
    if name == "DT_INVALID":
        return None
    name = name[3:].lower()
    ref = name.endswith("_ref")
    base = name[:-4] if ref else name
    base = {"float": "float32", "double": "float64", "half": "float16"}.get(base, base)
    return base + ("_ref" if ref else "")


def _shape(shape):
    return None if shape.unknown_rank else [d.size for d in shape.dim]


def _op(label: str):
    """`[note] name = Op(a, ^b)` -> ('Op', ['a'], ['b']), else (None, None, None)."""
    text = label
    if text.startswith("["):
        text = text[text.index("]") + 1:].lstrip()
    if " = " not in text or "(" not in text or not text.rstrip().endswith(")"):
        return None, None, None
    rhs = text.split(" = ", 1)[1]
    op, args = rhs.split("(", 1)
    args = [a.strip() for a in args.rstrip()[:-1].split(",") if a.strip()]
    return op, [a for a in args if a[0] != "^"], [a[1:] for a in args if a[0] == "^"]


def oracle(stats: step_stats_pb2.StepStats) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {"nodes": [], "kernels": [], "tensors": [], "allocations": []}
    seq = 0
    for d in stats.dev_stats:
        m = _DEV.search(d.device)
        dev = f"{m[1]}:{m[2]}"
        stream = m[3]
        if stream == "all" or m[4]:
            continue
        base = {"device": dev, "device_raw": d.device, "step": STEP}
        if stream is not None:
            for ns in d.node_stats:
                node, _, name = ns.node_name.partition(":")
                if name == "":
                    node, name = None, ns.node_name
                label = ns.timeline_label
                copy = next((s for s in (label, name) if s.startswith(("MEMCPY", "MEMSET"))), None)
                kind, nbytes, ck = "kernel", None, None
                if copy is not None:
                    kind = copy[:6].lower()
                    name = name.split(":")[-1]
                    found = re.search(r"(\d+) bytes", label)
                    nbytes = int(found[1]) if found else None
                    ck = _COPY_DIR.get(copy[6:10]) if kind == "memcpy" else None
                out["kernels"].append({**base, "stream": int(stream), "kind": kind, "name": name, "node_name": node,
                                       "start_ns": _ns(ns, "all_start"), "duration_ns": _ns(ns, "all_end_rel"),
                                       "bytes": nbytes, "copy_kind": ck,
                                       "params": json.dumps({"timeline_label": label}) if label else None})
            continue
        for ns in d.node_stats:
            start = _ns(ns, "all_start")
            op, inputs, control = _op(ns.timeline_label)
            outs = sorted(ns.output, key=lambda o: o.slot)
            params = {}
            if ns.memory:
                params["memory"] = [{k: getattr(mu, k) for k in ("allocator_name", "total_bytes", "peak_bytes",
                                                                "live_bytes", "allocator_bytes_in_use")
                                     if getattr(mu, k)} for mu in ns.memory]
            if ns.referenced_tensor:
                params["referenced_tensors"] = len(ns.referenced_tensor)
            if ns.thread_id and d.thread_names.get(ns.thread_id):
                params["thread_name"] = d.thread_names[ns.thread_id]
            ms = ns.memory_stats if ns.HasField("memory_stats") else None
            out["nodes"].append({
                **base, "node_name": ns.node_name, "op_type": op, "start_ns": start,
                "duration_ns": _ns(ns, "all_end_rel"), "thread_id": ns.thread_id or None, "seq": seq,
                "op_start_ns": start + _ns(ns, "op_start_rel"), "op_end_ns": start + _ns(ns, "op_end_rel"),
                "scheduled_ns": _ns(ns, "scheduled") or None, "timeline_label": ns.timeline_label or None,
                "inputs": inputs, "control_inputs": control or None,
                "outputs": [f"{ns.node_name}:{o.slot}" for o in outs] or None,
                "output_shapes": [_shape(o.tensor_description.shape) for o in outs] or None,
                "output_dtypes": [_dtype(o.tensor_description.dtype) for o in outs] or None,
                "temp_memory_bytes": ms.temp_memory_size if ms else None,
                "persistent_memory_bytes": ms.persistent_memory_size if ms else None,
                "params": json.dumps(params, sort_keys=True) if params else None})
            seq += 1
            for o in ns.output:
                td = o.tensor_description
                ad = td.allocation_description if td.HasField("allocation_description") else None
                out["tensors"].append({
                    **base, "node_name": ns.node_name, "slot": o.slot, "dtype": _dtype(td.dtype),
                    "shape": _shape(td.shape),
                    "requested_bytes": ad.requested_bytes if ad else None,
                    "allocated_bytes": ad.allocated_bytes if ad else None,
                    "allocator": (ad.allocator_name or None) if ad else None,
                    "allocation_id": ad.allocation_id if ad else None,
                    "ptr": (ad.ptr if 0 < ad.ptr < 2**63 else None) if ad else None,
                    "params": json.dumps({"has_single_reference": True}) if ad and ad.has_single_reference else None})
            for mu in ns.memory:
                for rec in mu.allocation_records:
                    out["allocations"].append({
                        **base, "allocator": mu.allocator_name or None, "node_name": ns.node_name,
                        "ts_ns": rec.alloc_micros * 1000, "bytes": rec.alloc_bytes,
                        "kind": "free" if rec.alloc_bytes < 0 else "alloc"})
    return out


def read_tables(path: Path) -> dict[str, list[dict]]:
    got: dict[str, list[pa.RecordBatch]] = {}
    for table, batch in tf_stepstats.read(path, ReadContext(run_id="r", source_file=path.name, file_ordinal=STEP)):
        got.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b).to_pylist() for t, b in got.items()}


def check(path: Path, stats: step_stats_pb2.StepStats) -> dict[str, list[dict]]:
    want = oracle(stats)
    got = read_tables(path)
    for table, rows in want.items():
        have = got.get(table, [])
        assert len(have) == len(rows), table
        for i, (h, w) in enumerate(zip(have, rows)):
            assert {k: h[k] for k in w} == w, (table, i)
    return want


def synthetic() -> step_stats_pb2.StepStats:
    ss = step_stats_pb2.StepStats()
    job = ss.dev_stats.add(device="/job:localhost/replica:0/task:0/device:GPU:0")
    job.thread_names[3] = "pool é \"q\""
    a = job.node_stats.add(node_name="a", all_start_nanos=2**60 + 1, all_start_micros=5, all_end_rel_micros=9,
                           op_start_rel_nanos=3, op_end_rel_micros=2, scheduled_micros=2**53 + 1, thread_id=3,
                           timeline_label="[GPU_0_bfc 1.5MB] a = MatMul(x, y:1, ^c)")
    for slot, dims, dt in ((2, [4, 8], types_pb2.DT_FLOAT), (0, [], types_pb2.DT_HALF_REF), (1, None, 0)):
        o = a.output.add(slot=slot)
        o.tensor_description.dtype = dt
        if dims is None:
            o.tensor_description.shape.unknown_rank = True
        else:
            for size in dims:
                o.tensor_description.shape.dim.add(size=size)
        if slot == 2:
            ad = o.tensor_description.allocation_description
            ad.requested_bytes, ad.allocated_bytes, ad.allocator_name = 128, 256, "GPU_0_bfc"
            ad.allocation_id, ad.ptr, ad.has_single_reference = 11, 2**64 - 5, True
        if slot == 0:
            o.tensor_description.allocation_description.ptr = 140000000000
    mu = a.memory.add(allocator_name="GPU_0_bfc", total_bytes=0, peak_bytes=2**40, live_bytes=-3)
    mu.allocation_records.add(alloc_micros=2**50, alloc_bytes=64)
    mu.allocation_records.add(alloc_micros=2**50 + 1, alloc_bytes=-64)
    a.memory.add()  # all zero: {} in the params
    a.memory_stats.temp_memory_size = 4096
    a.referenced_tensor.add()
    a.referenced_tensor.add()
    job.node_stats.add(node_name="b", all_start_micros=2**53 // 1000 + 7, thread_id=9,
                       timeline_label="b = NoOp()")  # a thread without a name
    job.node_stats.add(node_name="c", all_start_nanos=1, scheduled_nanos=5, scheduled_micros=7)  # no label
    for raw in ("/device:GPU:0/stream:all", "/device:GPU:0/memcpy"):
        ss.dev_stats.add(device=raw).node_stats.add(node_name="dup:k", all_start_micros=1)
    st = ss.dev_stats.add(device="/device:GPU:0/stream:14")
    st.node_stats.add(node_name="edge_1_x:MEMCPYDtoH", all_start_micros=2**50 + 3, all_end_rel_nanos=1500,
                      timeline_label="MEMCPYDtoH 4096 bytes")
    st.node_stats.add(node_name="op/p:Pack:MEMCPYDtoD", all_start_nanos=2**62, timeline_label="")
    st.node_stats.add(node_name="k:void foo::bar<int>(int)", all_start_nanos=5, timeline_label="k = Conv2D(a)")
    st.node_stats.add(node_name="zeroing:MEMSET", all_start_nanos=6, timeline_label="MEMSET 12 bytes")
    st.node_stats.add(node_name="bare", all_start_nanos=7)
    return ss


def test_synthetic_binary_and_text(tmp_path):
    ss = synthetic()
    binary = tmp_path / "s.pb"
    binary.write_bytes(ss.SerializeToString())
    want = check(binary, ss)
    assert [len(want[t]) for t in ("nodes", "kernels", "tensors", "allocations")] == [3, 5, 3, 2]
    # the oracle's own figures, by hand: a's start (nanos beat micros), params, the copy
    a = want["nodes"][0]
    assert a["start_ns"] == 2**60 + 1 and a["op_end_ns"] == 2**60 + 1 + 2000 and a["scheduled_ns"] == (2**53 + 1) * 1000
    assert a["outputs"] == ["a:0", "a:1", "a:2"] and a["output_shapes"] == [[], None, [4, 8]]
    assert a["params"] == ('{"memory": [{"allocator_name": "GPU_0_bfc", "live_bytes": -3, "peak_bytes": 1099511627776}, '
                           '{}], "referenced_tensors": 2, "thread_name": "pool \\u00e9 \\"q\\""}')
    assert want["kernels"][0]["start_ns"] == (2**50 + 3) * 1000 and want["kernels"][0]["bytes"] == 4096
    assert want["tensors"][0]["ptr"] is None  # past int64
    text = tmp_path / "s.txt"
    text.write_text(text_format.MessageToString(ss))
    check(text, ss)


@pytest.mark.parametrize("scenario,cls", [("tf_stepstats_gpu_streams", step_stats_pb2.StepStats),
                                          ("tf_runmetadata_text", run_metadata_pb2.RunMetadata)])
def test_fixtures(tmp_path, scenario, cls):
    (text,) = (DATA / scenario).glob("*.txt")
    msg = text_format.Parse(text.read_text(), cls(), allow_unknown_field=True)
    stats = msg.step_stats if cls is run_metadata_pb2.RunMetadata else msg
    want = check(text, stats)
    assert want["nodes"]
    binary = tmp_path / "t.pb"
    binary.write_bytes(msg.SerializeToString())
    check(binary, stats)


def test_column_builder_matches_batch_builder():
    """`base.ColumnBuilder` (the TF reader's) gives BatchBuilder's batches: the same rows cut
    at `batch_rows`, whether fed by columns or by rows, and the same error for a value
    Arrow refuses (its row's index in the file and its column)."""
    from tracedb.errors import TraceFormatError
    from tracedb.formats.base import BatchBuilder, ColumnBuilder

    cols = ("device", "step", "node_name", "start_ns", "inputs")
    rows = [("GPU:0", 1, f"n{i}", 2**62 + i, (f"a{i}",) * (i % 3) or None) for i in range(10)]

    def batches(b, feed):
        out = []
        for chunk in (rows[:3], rows[3:4], rows[4:]):
            out += feed(b, chunk)
        return out + list(b.flush())

    want = batches(BatchBuilder("nodes", 4, cols, annotate=False), lambda b, ch: [x for r in ch for x in b.append(r)])
    by_cols = batches(ColumnBuilder("nodes", 4, cols, annotate=False), lambda b, ch: list(b.extend(zip(*ch))))
    by_rows = batches(ColumnBuilder("nodes", 4, cols, annotate=False), lambda b, ch: [x for r in ch for x in b.append(r)])
    assert [b.num_rows for _, b in want] == [4, 4, 2]
    for got in (by_cols, by_rows):
        assert [t for t, _ in got] == ["nodes"] * 3
        assert all(g.equals(w) for (_, g), (_, w) in zip(got, want))

    bad = rows[:6] + [("GPU:0", 1, "big", 2**63, None)] + rows[6:]
    errors = []
    for b, feed in ((BatchBuilder("nodes", 4, cols, annotate=False), lambda b: [x for r in bad for x in b.append(r)]),
                    (ColumnBuilder("nodes", 4, cols, annotate=False), lambda b: list(b.extend(zip(*bad))))):
        with pytest.raises(TraceFormatError) as e:
            feed(b)
            list(b.flush())
        errors.append(str(e.value))
    assert errors[0] == errors[1] and errors[0].startswith("nodes row #6 (node_name 'big'): field start_ns")
