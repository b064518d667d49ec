"""Generic Chrome-trace reader: a hand-written TF timeline (tests/data/chrome_trace_tf_timeline)
and small inline traces for B/E pairs, bare arrays, thread-named GPU streams and errors.

Expected numbers read off timeline_step0.json by hand: CPU:0 Compute (pid 1) has 3 ops,
3+212+11 = 226 µs; GPU:0 Compute (pid 3) 5 ops, 25+38+14+9+51 = 137 µs; stream:13 (pid 7)
4 kernels, 21+4+3+17 = 45 µs; stream:14 (pid 11) one MEMCPYHtoD, 6 µs. stream:all (pid 5)
and memcpy (pid 9) repeat those 5 rows and must not be counted again.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from tracedb.errors import TraceFormatError
from tracedb.formats import chrome_trace, detect, kineto
from tracedb.formats.base import ReadContext, read_head

TIMELINE = Path(__file__).parent / "data" / "chrome_trace_tf_timeline" / "timeline_step0.json"
T0 = 1562145600000000  # µs, the timeline's epoch base


def _read(path: Path) -> dict[str, list[dict]]:
    ctx = ReadContext(run_id="r", source_file=path.name)
    out: dict[str, list] = {}
    for table, batch in chrome_trace.read(path, ctx):
        out.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b).to_pylist() for t, b in out.items()}


def test_detected_as_chrome_trace_not_kineto():
    head = read_head(TIMELINE)
    assert chrome_trace.sniff(head) and not kineto.sniff(head)
    assert detect(TIMELINE).NAME == "chrome_trace"


def test_tf_timeline_nodes():
    nodes = _read(TIMELINE)["nodes"]
    assert len(nodes) == 8
    by_dev = Counter(n["device"] for n in nodes)
    assert by_dev == {"CPU:0": 3, "GPU:0": 5}
    assert sum(n["duration_ns"] for n in nodes if n["device"] == "CPU:0") == 226_000
    assert sum(n["duration_ns"] for n in nodes if n["device"] == "GPU:0") == 137_000
    mm = next(n for n in nodes if n["node_name"] == "dense/MatMul")
    assert mm["op_type"] == "MatMul" and mm["start_ns"] == (T0 + 370) * 1000
    assert mm["device_raw"] == "/job:localhost/replica:0/task:0/device:GPU:0 Compute"
    assert json.loads(mm["params"]) == {"input0": "IteratorGetNext/_2", "input1": "dense/kernel/read", "cat": "Op"}
    assert [n["node_name"] for n in nodes][:3] == ["_SOURCE", "IteratorGetNext", "IteratorGetNext/_1"]


def test_tf_timeline_kernels_once_each():
    kernels = _read(TIMELINE)["kernels"]
    assert len(kernels) == 5  # not 10: stream:all and memcpy repeat the numbered streams
    assert Counter((k["stream"], k["kind"]) for k in kernels) == {(13, "kernel"): 4, (14, "memcpy"): 1}
    assert sum(k["duration_ns"] for k in kernels if k["kind"] == "kernel") == 45_000
    copy = next(k for k in kernels if k["kind"] == "memcpy")
    assert copy["copy_kind"] == "HtoD" and copy["duration_ns"] == 6_000
    assert copy["node_name"] == "edge_8_IteratorGetNext" and copy["bytes"] is None
    sm = next(k for k in kernels if k["name"] == "SparseSoftmaxCrossEntropyWithLogits")
    assert sm["node_name"] == "loss/SparseSoftmaxCrossEntropyWithLogits" and sm["device"] == "GPU:0"
    assert sm["start_ns"] == (T0 + 470) * 1000


def test_bare_array_with_begin_end_and_stream_threads(tmp_path):
    events = [
        {"name": "thread_name", "ph": "M", "pid": 5, "tid": 7, "args": {"name": "stream 7 "}},
        {"name": "process_name", "ph": "M", "pid": 5, "args": {"name": "GPU 1"}},
        {"name": "step", "ph": "B", "pid": 1, "tid": 1, "ts": 100.5},
        {"name": "inner", "ph": "B", "pid": 1, "tid": 1, "ts": 101, "args": {"op": "Conv"}},
        {"name": "other thread", "ph": "B", "pid": 1, "tid": 2, "ts": 102},
        {"name": "inner", "ph": "E", "pid": 1, "tid": 1, "ts": 103.25},
        {"name": "step", "ph": "E", "pid": 1, "tid": 1, "ts": 110},
        {"name": "orphan end", "ph": "E", "pid": 1, "tid": 3, "ts": 111},
        {"name": "gemm", "ph": "X", "pid": 5, "tid": 7, "ts": 104, "dur": 2.5, "args": {"bytes": 0}},
        {"name": "Memset", "ph": "X", "pid": 5, "tid": 7, "ts": 107, "dur": 1, "args": {"bytes": 64}},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(events))
    assert chrome_trace.sniff(read_head(path)) and not kineto.sniff(read_head(path))
    out = _read(path)
    nodes = {n["node_name"]: n for n in out["nodes"]}
    assert set(nodes) == {"step", "inner", "other thread"}  # orphan E skipped
    assert nodes["inner"]["op_type"] == "Conv" and nodes["inner"]["duration_ns"] == 2250
    assert nodes["step"]["start_ns"] == 100500 and nodes["step"]["duration_ns"] == 9500
    assert nodes["other thread"]["duration_ns"] is None  # never closed
    kernels = out["kernels"]
    assert [(k["name"], k["kind"], k["stream"], k["device"], k["bytes"]) for k in kernels] == [
        ("gemm", "kernel", 7, "GPU:1", None), ("Memset", "memset", 7, "GPU:1", 64)]


def test_errors(tmp_path):
    cases = {
        "notrace.json": ('{"a": 1}', "no 'traceEvents'"),
        "cut.json": ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X", "na', "truncated JSON"),
        "nots.json": ('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "dur": 2}]}',
                      r"X event #0 \('a'\) has no 'ts'"),
    }
    for name, (text, msg) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(TraceFormatError, match=msg):
            _read(path)


def test_explicit_kind_and_copy_kind_win_over_name_guessing(tmp_path):
    """tracedb's export writes args.kind: a kernel whose launching op says 'memcpy' stays a kernel."""
    from tracedb.formats import chrome_trace
    from tracedb.formats.base import ReadContext

    trace = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "stream 7"}},
        {"ph": "X", "name": "copy_kernel", "pid": 1, "tid": 7, "ts": 1.0, "dur": 2.0,
         "args": {"kind": "kernel", "name": "aten::memcpy_"}},
        {"ph": "X", "name": "Memcpy", "pid": 1, "tid": 7, "ts": 5.0, "dur": 1.5,
         "args": {"kind": "memcpy", "copy_kind": "DtoH", "bytes": 64}},
    ]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    rows = [r for t, b in chrome_trace.read(path, ReadContext("r", "t.json")) if t == "kernels" for r in b.to_pylist()]
    assert [(r["kind"], r["copy_kind"], r["bytes"], r["stream"]) for r in rows] == [
        ("kernel", None, None, 7), ("memcpy", "DtoH", 64, 7)]
    assert [r["duration_ns"] for r in rows] == [2000, 1500]


# ---- real profiler renderings -------------------------------------------------------

JAX_SESSION = Path(__file__).parent / "data" / "jax_profile_folder" / "plugins" / "profile" / "2026_11_26_04_20_26"
TF_SEED_TIMELINE = Path(__file__).parent / "data" / "chrome_trace_tf_timeline_seed" / "timeline.json.gz"


def _raw_gpu_events(path: Path) -> list[dict]:
    """X events on XProf's GPU process, straight from the JSON (no tracedb code)."""
    import gzip

    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    gpu_pids = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
                and e["args"]["name"].startswith("/device:GPU:")}
    return [e for e in events if e.get("ph") == "X" and e["pid"] in gpu_pids]


@pytest.mark.parametrize("rendering", ["vm.trace.json.gz", "perfetto_trace.json.gz"])
def test_xprof_gpu_stream_lane_is_kernels(rendering):
    # `/device:GPU:0` + thread `Stream #14(Compute)` was taken for TF's host-timed lane.
    raw = _raw_gpu_events(JAX_SESSION / rendering)
    assert len(raw) == 48
    got = _read(JAX_SESSION / rendering)
    kernels = got["kernels"]
    assert len(kernels) == len(raw) and {k["stream"] for k in kernels} == {14}
    assert {k["device"] for k in kernels} == {"GPU:0"} and {k["kind"] for k in kernels} == {"kernel"}
    assert sum(k["duration_ns"] for k in kernels) == round(sum(e["dur"] for e in raw) * 1000) == 1_591_723
    assert len(got["nodes"]) == 128  # the host lanes only


def test_xprof_kernels_equal_across_renderings():
    from tracedb.formats import xspace

    def kernels(mod, path):
        rows = []
        for table, batch in mod.read(path, ReadContext(run_id="r", source_file=path.name)):
            if table == "kernels":
                rows += batch.select(["device", "stream", "kind", "name", "start_ns", "duration_ns"]).to_pylist()
        return sorted(rows, key=lambda r: (r["start_ns"], r["name"]))

    ref = kernels(xspace, JAX_SESSION / "vm.xplane.pb")
    assert len(ref) == 48
    for rendering in ("vm.trace.json.gz", "perfetto_trace.json.gz"):
        assert kernels(chrome_trace, JAX_SESSION / rendering) == ref


def test_tf_timeline_of_seed_copies_by_name_and_memcpy_lane():
    # TF's timeline tool names a stream row `a/b:Pack:MEMCPYDtoD` just `Pack`: 10 copies on
    # stream 13 were kernels (739 + 16). Expected numbers from the StepStats itself.
    from rawtrace import tf

    want = Counter((k.stream, k.kind) for k in tf().kernels)
    assert want == {(13, "kernel"): 729, (13, "memcpy"): 10, (14, "memcpy"): 8, (15, "memcpy"): 8}
    kernels = _read(TF_SEED_TIMELINE)["kernels"]
    assert Counter((k["stream"], k["kind"]) for k in kernels) == want
    got_ns = Counter()
    for k in kernels:
        got_ns[k["kind"]] += k["duration_ns"]
    want_ns = Counter()
    for k in tf().kernels:
        want_ns[k.kind] += k.dur
    assert got_ns == want_ns
