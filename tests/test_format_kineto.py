"""Kineto reader against a real H200 PyTorch-profiler trace, plus hand-made edge cases.

Numbers were worked out with plain `json.load(..., parse_float=Decimal)` in a throwaway
script (counts per `cat`, sums of `dur`, ProfilerStep containment, correlation ->
cuda_runtime -> External id -> cpu_op), independently of the reader.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from tracedb.errors import TraceFormatError
from tracedb.formats import detect, kineto
from tracedb.formats.base import ReadContext, read_head
from tracedb.formats.jsonstream import EventStream

FIXTURE = Path(__file__).parent / "data" / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
BASE_NS = 1790857026000000000


def _read(path: Path) -> tuple[dict[str, pa.Table], ReadContext]:
    ctx = ReadContext(run_id="r", source_file=path.name)
    batches: dict[str, list] = {}
    for table, batch in kineto.read(path, ctx):
        batches.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b) for t, b in batches.items()}, ctx


@pytest.fixture(scope="module")
def fixture_tables():
    return _read(FIXTURE)


def test_detected_as_kineto():
    assert kineto.sniff(read_head(FIXTURE))
    assert detect(FIXTURE).NAME == "kineto"


def test_counts_and_kernel_time(fixture_tables):
    tables, _ = fixture_tables
    k = tables["kernels"].to_pylist()
    assert Counter(r["kind"] for r in k) == {"kernel": 1038, "memset": 116, "memcpy": 48}
    # 231,940.705 µs of kernels; ts/dur decimal text converts to ns exactly.
    assert sum(r["duration_ns"] for r in k if r["kind"] == "kernel") == 231_940_705
    assert sum(r["duration_ns"] for r in k if r["kind"] == "memcpy") == 866_650
    assert sum(r["bytes"] for r in k if r["kind"] == "memcpy") == 1_610_612_736
    assert sum(r["bytes"] for r in k if r["kind"] == "memset") == 27_264
    assert {r["copy_kind"] for r in k if r["kind"] == "memcpy"} == {"DtoD"}
    assert {r["device"] for r in k} == {"GPU:0"} and {r["stream"] for r in k} == {7}
    assert tables["nodes"].num_rows == 7245
    assert "allocations" not in tables  # this trace was taken without profile_memory


def test_steps(fixture_tables):
    tables, _ = fixture_tables
    nodes = tables["nodes"].column("step").to_pylist()
    assert Counter(nodes) == {1: 2415, 2: 2415, 3: 2415}  # autograd-thread ops included
    # 260 GPU activities were launched before the profiler started: no launch, no step.
    kern = tables["kernels"].column("step").to_pylist()
    assert Counter(kern) == {1: 314, 2: 314, 3: 314, None: 260}


def test_every_linked_kernel_carries_its_op():
    tables, _ = _read(FIXTURE)
    doc = json.load(gzip.open(FIXTURE))
    events = doc["traceEvents"]
    ops = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    launch = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    expected = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            rt = launch.get(e["args"]["correlation"])
            if rt is not None:
                expected[e["args"]["correlation"]] = (ops[rt["args"]["External id"]],
                                                      BASE_NS + round(rt["ts"] * 1000))
    assert len(expected) == 942
    linked = 0
    for r in tables["kernels"].to_pylist():
        want = expected.get(r["correlation_id"])
        if want is None:
            assert r["node_name"] is None and r["launch_start_ns"] is None
            continue
        linked += 1
        assert r["node_name"] == want[0]
        assert abs(r["launch_start_ns"] - want[1]) <= 1  # float rounding in the check
        assert r["launch_start_ns"] < r["start_ns"]
    assert linked == 942
    names = Counter(r["node_name"] for r in tables["kernels"].to_pylist() if r["node_name"])
    assert names["aten::copy_"] == 204 and names["aten::mm"] == 165


def test_node_columns_and_time(fixture_tables):
    tables, ctx = fixture_tables
    first = tables["nodes"].slice(0, 1).to_pylist()[0]
    assert first["node_name"] == "autograd::engine::evaluate_function: NllLossBackward0"
    assert first["start_ns"] == BASE_NS + 4796273132357979  # ts is relative to baseTimeNanoseconds
    assert first["duration_ns"] == 206976
    assert first["thread_id"] == 830 and first["correlation_id"] == 26625 and first["device"] == "CPU:0"
    nll = tables["nodes"].slice(2, 1).to_pylist()[0]
    assert nll["op_type"] == "aten::nll_loss_backward"
    assert nll["input_shapes"] == [[], [8192, 1000], [8192], [], [], [], []]
    # the trace's C++ names ("float", "long int") in the common spelling
    assert nll["input_dtypes"] == ["float32", "float32", "int64", "", "Scalar", "Scalar", "float32"]
    assert json.loads(nll["params"])["Concrete Inputs"][4] == "1"
    assert ctx.metadata["device_properties"][0]["name"] == "NVIDIA H200"
    assert "distributed_info" not in ctx.metadata
    kern = tables["kernels"].slice(0, 1).to_pylist()[0]
    assert kern["grid"] == [98304, 1, 1] and kern["block"] == [128, 1, 1]
    assert kern["registers_per_thread"] == 18 and kern["occupancy"] == 100.0


def test_stream_matches_json_load_at_tiny_chunks():
    doc = json.load(gzip.open(FIXTURE))
    stream = EventStream(FIXTURE, chunk_chars=97)  # every event straddles chunk edges
    assert list(stream) == doc["traceEvents"]  # JNum compares as the float it is
    assert stream.meta["baseTimeNanoseconds"] == BASE_NS and stream.meta["traceName"] == "kineto_fp32.json"


# --- hand-made traces -------------------------------------------------------------------

def _write(tmp_path: Path, doc, name="t.json") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


SMALL_EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 2, "ts": 10.5, "dur": 20,
     "args": {"External id": 7, "Input Dims": [[[2, 3], [2, 3]], []], "Input type": ["TensorList", "Scalar"]}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 2, "ts": 5, "dur": 100,
     "args": {"External id": 6}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 12.25, "dur": 3,
     "args": {"External id": 7, "correlation": 99}},
    {"ph": "X", "cat": "kernel", "name": "cat_kernel", "pid": 0, "tid": 7, "ts": 40.001, "dur": 1.5,
     "args": {"device": 1, "stream": 7, "correlation": 99}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 2, "ts": 11,
     "args": {"Total Reserved": 2097152, "Total Allocated": 1536, "Bytes": 512, "Addr": 139872,
              "Device Type": 1, "Device Id": 1}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 2, "ts": 29,
     "args": {"Total Reserved": 0, "Total Allocated": 0, "Bytes": -24, "Addr": 4242,
              "Device Type": 0, "Device Id": -1}},
]


def test_metadata_after_events_memory_and_runtime_link(tmp_path):
    # Top-level keys after traceEvents still apply to every row (two-pass read).
    text = ('{"schemaVersion": 1, "traceEvents": ' + json.dumps(SMALL_EVENTS)
            + ', "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},'
            ' "baseTimeNanoseconds": 1000000000000}')
    path = _write(tmp_path, text)
    assert kineto.sniff(read_head(path))
    tables, ctx = _read(path)
    assert ctx.metadata["distributed_info"]["world_size"] == 8 and ctx.metadata["rank"] == 3
    node = tables["nodes"].to_pylist()[0]
    assert node["start_ns"] == 1000000000000 + 10500 and node["step"] == 4 and node["rank"] == 3
    assert node["input_shapes"] == [None, []]  # a TensorList has no single shape...
    assert json.loads(node["params"])["Input Dims"][0] == [[2, 3], [2, 3]]  # ...kept raw
    kern = tables["kernels"].to_pylist()[0]
    assert kern["node_name"] == "aten::cat" and kern["step"] == 4 and kern["rank"] == 3
    assert kern["device"] == "GPU:1" and kern["start_ns"] == 1000000040001 and kern["duration_ns"] == 1500
    assert kern["launch_start_ns"] == 1000000012250
    allocs = tables["allocations"].to_pylist()
    assert [(a["device"], a["kind"], a["bytes"], a["ts_ns"]) for a in allocs] == [
        ("GPU:1", "alloc", 512, 1000000011000), ("CPU:0", "free", -24, 1000000029000)]
    assert allocs[0]["total_allocated_bytes"] == 1536 and allocs[0]["total_reserved_bytes"] == 2097152
    assert allocs[0]["address"] == 139872 and allocs[1]["device_raw"] == "cpu:-1"


def test_truncated_json(tmp_path):
    text = gzip.open(FIXTURE).read().decode()
    path = _write(tmp_path, text[: len(text) // 2])
    with pytest.raises(TraceFormatError, match="truncated JSON"):
        _read(path)


def test_truncated_gzip(tmp_path):
    data = FIXTURE.read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated"):
        _read(path)


def test_not_a_trace(tmp_path):
    path = _write(tmp_path, {"a": 1})
    assert not kineto.sniff(read_head(path))
    with pytest.raises(TraceFormatError, match="no 'traceEvents'"):
        _read(path)


def test_kernel_without_ts(tmp_path):
    events = [dict(e) for e in SMALL_EVENTS]
    del events[3]["ts"]
    path = _write(tmp_path, {"baseTimeNanoseconds": 0, "traceEvents": events})
    with pytest.raises(TraceFormatError, match=r"kernel event #3 \('cat_kernel'\) has no 'ts'"):
        _read(path)


def test_event_not_an_object(tmp_path):
    path = _write(tmp_path, '{"deviceProperties": [], "traceEvents": [{"ph": "M"}, 5]}')
    with pytest.raises(TraceFormatError, match="#1 is not a JSON object"):
        _read(path)


def test_ids_out_of_order_link(tmp_path):
    """Ops, calls and kernels whose ids come in no order (one past 32 bits) link by them; an
    id that is no int never links; the first op with an External id is the one linked."""
    ids = (30, 10, 20, 10_000_000_000)
    events = []
    for k, x in enumerate(ids):
        t = 100 * k
        events.append({"ph": "X", "cat": "cpu_op", "name": f"op{x}", "pid": 1, "tid": 1, "ts": t, "dur": 50,
                       "args": {"External id": x}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 10, "dur": 5, "args": {"correlation": x}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "late_twin", "pid": 1, "tid": 2, "ts": 900, "dur": 5,
                   "args": {"External id": 20}})  # a second op with External id 20: not linked
    for x in reversed(ids):
        events.append({"ph": "X", "cat": "kernel", "name": f"k{x}", "pid": 0, "tid": 7, "ts": 1000, "dur": 1,
                       "args": {"device": 0, "stream": 7, "correlation": x}})
    events.append({"ph": "X", "cat": "kernel", "name": "by_ext", "pid": 0, "tid": 7, "ts": 1001, "dur": 1,
                   "args": {"device": 0, "stream": 7, "correlation": 99, "External id": 20}})
    events.append({"ph": "X", "cat": "kernel", "name": "text_id", "pid": 0, "tid": 7, "ts": 1002, "dur": 1,
                   "args": {"device": 0, "stream": 7, "correlation": "30", "External id": "30"}})
    tables, _ = _read(_write(tmp_path, {"baseTimeNanoseconds": 0, "traceEvents": events}))
    got = {r["name"]: (r["node_name"], r["link"], r["launch_start_ns"]) for r in tables["kernels"].to_pylist()}
    want = {f"k{x}": (f"op{x}", "launch", (100 * k + 10) * 1000) for k, x in enumerate(ids)}
    assert got == {**want, "by_ext": ("op20", "external_id", None), "text_id": (None, None, None)}
    calls = tables["runtime_calls"].to_pylist()
    assert [(r["node_name"], r["kernel_name"], r["kernel_count"]) for r in calls] == [
        (f"op{x}", f"k{x}", 1) for x in ids]


@pytest.mark.slow
def test_large_trace_streams_in_bounded_memory(tmp_path):
    """~24 MB synthetic trace (6 fixture replicas): same links per replica, far less RSS."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_kineto_memory", Path(__file__).parent.parent / "bench" / "bench_kineto_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = tmp_path / "big.json.gz"
    replicas = bench.synthesize(path, 24, use_gzip=True)
    reader = bench.measure("reader", path)
    baseline = bench.measure("baseline", path)
    assert reader["nodes"] == 7245 * replicas and reader["kernels"] == 1202 * replicas
    assert reader["peak_rss_mb"] < baseline["peak_rss_mb"]
    tables, _ = _read(path)
    k = tables["kernels"]
    assert k.column("node_name").null_count == 260 * replicas
    assert Counter(k.column("step").to_pylist())[3 * replicas] == 314  # last replica's step 3


MEMORY_STEP_EVENTS = [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1,
     "ts": 100.0, "dur": 100.0, "args": {"External id": 1}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 110.5,
     "dur": 5.25, "args": {"External id": 2}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
     "ts": 111.0, "args": {"Total Reserved": 2097152, "Total Allocated": 512, "Bytes": 512,
                           "Addr": 1398, "Device Type": 1, "Device Id": 0}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
     "ts": 150.0, "args": {"Total Reserved": 2097152, "Total Allocated": 0, "Bytes": -512,
                           "Addr": 1398, "Device Type": 1, "Device Id": 0}},
]


def test_memory_events_carry_their_profiler_step(tmp_path: Path):
    """ProfilerStep#7 spans 100..200 us; the alloc at 111 us and its free at 150 us lie in it."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"baseTimeNanoseconds": 0, "deviceProperties": [], "traceEvents": MEMORY_STEP_EVENTS}))
    batches: dict[str, list] = {}
    for table, batch in kineto.read(path, ReadContext("r", path.name)):
        batches.setdefault(table, []).append(batch)
    nodes = pa.Table.from_batches(batches["nodes"]).to_pylist()
    allocs = pa.Table.from_batches(batches["allocations"]).to_pylist()
    assert [n["step"] for n in nodes] == [7]
    assert [(a["bytes"], a["step"]) for a in allocs] == [(512, 7), (-512, 7)]


@pytest.mark.parametrize("cat", ["kernel", "gpu_memcpy", "cuda_runtime", "cuda_driver", "user_annotation",
                                 "gpu_user_annotation"])
def test_args_that_are_no_object_name_the_event_and_the_file(tmp_path, cat):
    """`args` given as a JSON list on an event whose row reads args' keys: the one-line
    error names the event (the generic Chrome-trace reader, tried after the Kineto
    reader fails, refuses the file too), and `ingest` names the file; the other file of
    the batch lands."""
    from tracedb import formats
    from tracedb.ingest import ingest

    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 10,
          "args": {"External id": 1}}
    bad = {"ph": "X", "cat": cat, "name": "odd", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": [1, 2]}
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    path = _write(run, {"baseTimeNanoseconds": 0, "traceEvents": [op, bad]}, name="bad.json")
    _write(run, {"baseTimeNanoseconds": 0, "traceEvents": [op]}, name="good.json")
    error = rf"^{cat} event #1 \('odd'\): TypeError: 'args' is no JSON object: \[1, 2\]$"
    with pytest.raises(TraceFormatError, match=error):
        list(formats.read(path, ReadContext("r", "f"), "kineto"))
    summary = ingest([run], tmp_path / "wh", partial=True)
    [(where, err)] = summary.errors
    assert where.endswith("bad.json") and "'args' is no JSON object" in err and "\n" not in err
    assert sum(r.rows.get("nodes", 0) for r in summary.runs) == 1  # good.json's op landed


def test_a_spill_that_cannot_be_written_is_not_blamed_on_the_source(tmp_path):
    """The link state of a large file goes to a temporary folder (`kineto._Spill`); a write
    there that fails (file-size limit: EFBIG) is a one-line WarehouseError, not the trace's."""
    import subprocess
    import sys

    root = Path(__file__).parent.parent
    script = f"""
import resource, signal, sys
sys.path.insert(0, {str(root)!r})
from pathlib import Path
from tracedb.formats import kineto
from tracedb.formats.base import ReadContext
kineto.SPILL_BYTES = 0
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
try:
    list(kineto.read(Path({str(FIXTURE)!r}), ReadContext("r", "f")))
except Exception as e:
    print(type(e).__name__, e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("WarehouseError warehouse error: cannot write "), out.stdout + out.stderr
    assert "temporary link state" in line and "File too large" in line and "not at fault" in line
