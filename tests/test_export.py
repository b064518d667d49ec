"""Chrome-trace export of an ingested run: what a viewer sees, and the exact round trip.

The XSpace fixture's numbers (see tests/test_format_xspace.py for how they were derived):
30 GPU kernels summing 3,910,125 ns on stream 14, 158 timed host nodes on threads 635 and
"python3", 20 allocator events on GPU:0; and the 30 XLA ops the GPU ran (untimed nodes on
GPU:0, tests/test_flops_xspace.py), which travel as metadata events like every untimed row. The Kineto numbers come from the raw JSON
(`rawtrace`, plain `json`), never from tracedb's code.
"""

from __future__ import annotations

import collections
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest

from tracedb import catalog, schema
from tracedb.errors import TracedbError
from tracedb.export import _us, export_chrome
from tracedb.ingest import ingest

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "xspace_jax_h200" / "jax_h200.xplane.pb"
KINETO = DATA / "kineto_h200_annotated" / "annotated_h200_bf16.json.gz"
RUN = "jax"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("wh")
    summary = ingest([FIXTURE], wh, run_id=RUN)
    assert summary.ok, summary.errors
    return wh


def _load(path: Path) -> list[dict]:
    # Decimal keeps the ns digits of ts/dur exactly, as written.
    from rawtrace import load_json_trace

    return load_json_trace(path)["traceEvents"]


def _names(events: list[dict]) -> tuple[dict, dict]:
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    return procs, threads


def test_export_events(warehouse, tmp_path):
    out = tmp_path / "trace.json"
    n = export_chrome(warehouse, RUN, out)
    doc = json.loads(out.read_text())
    assert list(doc) == ["tracedbExport", "baseTimeNanoseconds", "displayTimeUnit", "traceEvents"]
    events = _load(out)
    assert n == len(events) == 9 + 30 + 30 + 158 + 30 * 2 + 20 + 20
    counts = collections.Counter((e["ph"], e.get("cat")) for e in events)
    assert counts == {("X", "kernel"): 30, ("X", "cpu_op"): 158, ("s", "ac2g"): 30, ("f", "ac2g"): 30,
                      ("i", "cpu_instant_event"): 20, ("C", None): 20, ("M", None): 9 + 30}
    procs, threads = _names(events)
    assert sorted(procs.values()) == ["CPU:0", "GPU:0"]
    assert set(map(lambda k: (procs[k[0]], threads[k]), threads)) == {
        ("GPU:0", "stream 14"), ("GPU:0", "stream 14 (2)"), ("GPU:0", "memory"), ("CPU:0", "Host Threads/635"),
        ("CPU:0", "python3")}
    # CUDA-graph kernels overlap on stream 14: on each thread, slices nest (as Perfetto's JSON
    # importer needs; it drops the others), the overlapping ones on the stream's extra thread
    lanes = collections.defaultdict(list)
    for e in sorted((e for e in events if e["ph"] == "X"), key=lambda e: (e["ts"], -e["dur"])):
        stack = lanes[(e["pid"], e["tid"])]
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        assert not stack or e["ts"] + e["dur"] <= stack[-1], e["name"]
        stack.append(e["ts"] + e["dur"])
    assert {e["args"]["stream"] for e in events if e.get("cat") == "kernel"} == {14}

    gpu = [e for e in events if e.get("cat") == "kernel"]
    assert sum(e["dur"] for e in gpu) == Decimal("3910.125")
    base = doc["baseTimeNanoseconds"]  # the run's first time, cut to a whole µs, as Kineto's ts are relative
    assert base == 52_000 and min(e["ts"] for e in events if "ts" in e) == Decimal("0.158")  # an allocation
    assert base + gpu[0]["ts"] * 1000 == 17_251_073 and gpu[0]["dur"] == Decimal("197.727")
    assert gpu[0]["args"]["tracedb"]["node_name"] == "command_buffer_1"  # the launching op
    assert gpu[0]["args"]["grid"] == [512, 1, 1] and gpu[0]["args"]["stream"] == 14  # Kineto's args
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    assert sum(e["dur"] for e in ops) == Decimal("73314.496")
    assert all(0 <= e["tid"] < 2**31 for e in events)  # small non-negative ints, as Perfetto wants
    mem = [e["args"]["bytes_in_use"] for e in events if e["ph"] == "C"]
    assert max(mem) == 134_218_240  # GPU_0_bfc bytes_allocated after the 64 MiB buffer
    assert max(e["args"]["Total Allocated"] for e in events if e["name"] == "[memory]") == 134_218_240


def test_timestamps_keep_ns_digits():
    # An epoch-based ns time (this fixture's profile_start_time) has 19 digits: a float µs
    # value would round it, the exported text keeps it exactly.
    assert _us(1_795_653_288_812_422_002) == "1795653288812422.002"
    assert _us(5) == "0.005" and _us(-1500) == "-1.500"


def test_export_device_filter(warehouse):
    buf = io.StringIO()
    n = export_chrome(warehouse, RUN, buf, devices=["gpu0"])
    events = json.loads(buf.getvalue())["traceEvents"]
    assert n == len(events) == 30 + 20 + 20 + 5 + 30  # kernels, [memory], counters, metadata, XLA ops; no flows
    raw = io.BytesIO()
    assert export_chrome(warehouse, RUN, raw, devices=["CPU:0"]) == 158 + 4
    assert len(json.loads(raw.getvalue())["traceEvents"]) == 162


def test_export_unknown_run(warehouse, tmp_path):
    with pytest.raises(TracedbError, match="no events for run 'nope'"):
        export_chrome(warehouse, "nope", tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_export_draws_launch_arrows_xspace(warehouse, tmp_path):
    # XSpace: each kernel's host launch event (cuGraphLaunch) shares its correlation_id.
    out = tmp_path / "t.json"
    export_chrome(warehouse, RUN, out)
    events = _load(out)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == 30 and all(e["bp"] == "e" for e in ends.values())
    by_thread = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append(e)

    def enclosing(f):  # the slices a flow end binds to on its thread (half-open: kernels abut)
        return [e for e in by_thread[(f["pid"], f["tid"])] if e["ts"] <= f["ts"] < e["ts"] + e["dur"]]

    for fid, s in starts.items():
        assert {e["name"] for e in enclosing(s)} >= {"cuGraphLaunch (CudaGraph:2)"}
        kernel = [e for e in enclosing(ends[fid]) if e["ts"] == ends[fid]["ts"]]  # (graph kernels overlap)
        assert len(kernel) == 1 and kernel[0]["cat"] == "kernel" and s["ts"] <= ends[fid]["ts"]


# ---- Kineto: what a Kineto consumer sees, and the runtime lane ----------------------------


@pytest.fixture(scope="module")
def kineto_export(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("kineto")
    wh = tmp / "wh"
    assert ingest([KINETO], wh, run_id="torch").ok
    out = tmp / "torch.json.gz"
    export_chrome(wh, "torch", out)
    return wh, out


def test_kineto_categories_as_the_raw_trace(kineto_export):
    """A Kineto consumer (HTA, TensorBoard) finds the raw trace's events in the export
    under Kineto's own categories: per table, the same number, by rawtrace's rules."""
    from rawtrace import kineto_table, load_json_trace

    raw = collections.Counter(map(kineto_table, load_json_trace(KINETO)["traceEvents"]))
    exported = collections.Counter(map(kineto_table, _load(kineto_export[1])))
    for table in ("nodes", "kernels", "runtime_calls", "annotations", "allocations"):
        assert exported[table] == raw[table] > 0, table
    assert raw["allocations"] == 1008 and raw["kernels"] == 399 and raw["runtime_calls"] == 522


def test_kineto_runtime_lane_is_the_real_calls(kineto_export):
    """Issue: the runtime lane showed zero-length `launch` markers. It holds each raw
    runtime call: its category, name, start and duration, exactly."""
    from rawtrace import kineto_cat, load_json_trace, us_ns

    doc = load_json_trace(KINETO)
    base = int(doc["baseTimeNanoseconds"])

    def call(e, t0):
        return (kineto_cat(e), e["name"], t0 + us_ns(e["ts"]), us_ns(e["dur"]))

    raw = sorted(call(e, base) for e in doc["traceEvents"]
                 if e.get("ph") == "X" and str(kineto_cat(e)).endswith(("_runtime", "_driver")))
    from rawtrace import load_json_trace as load

    exported = load(kineto_export[1])
    events = exported["traceEvents"]
    lane = sorted(call(e, int(exported["baseTimeNanoseconds"])) for e in events if e.get("ph") == "X" and e["cat"].endswith(("_runtime", "_driver")))
    assert lane == raw and len(raw) == 522 and sum(c[3] for c in raw) > 0
    assert not [e for e in events if e.get("name") == "launch"]
    # every launch call with a GPU activity of its correlation starts one arrow to it
    launched = {(e["args"]["correlation"]) for e in doc["traceEvents"]
                if kineto_cat(e) in ("kernel", "gpu_memcpy", "gpu_memset")} & {
        (e["args"].get("correlation")) for e in doc["traceEvents"]
        if str(kineto_cat(e)).endswith(("_runtime", "_driver"))}
    flows = collections.Counter(e["ph"] for e in events if e.get("cat") == "ac2g")
    n_launched = sum(1 for e in doc["traceEvents"] if kineto_cat(e) in ("kernel", "gpu_memcpy", "gpu_memset")
                     and e["args"].get("correlation") in launched)
    assert flows == {"s": n_launched, "f": n_launched} and n_launched == 399


def test_kineto_reader_reads_the_export_alike(kineto_export):
    """The export is a Kineto trace: tracedb's Kineto reader, made to read it, derives the
    same kernel -> op links, launch times and steps as from the raw trace."""
    import pyarrow as pa

    from tracedb.formats import kineto
    from tracedb.formats.base import ReadContext

    wh, out = kineto_export
    batches = collections.defaultdict(list)
    for table, batch in kineto.read(out, ReadContext("x", "t")):
        batches[table].append(batch)
    cols = ["name", "start_ns", "duration_ns", "node_name", "step", "launch_start_ns", "stream", "device", "bytes", "link"]
    got = pa.Table.from_batches(batches["kernels"]).select(cols).to_pylist()
    con = catalog.connect(wh)
    try:
        want = [dict(zip(cols, r)) for r in con.execute(f"SELECT {', '.join(cols)} FROM kernels").fetchall()]
        steps = con.execute("SELECT step, start_ns, duration_ns FROM steps ORDER BY step").fetchall()
    finally:
        con.close()
    key = lambda r: tuple(map(str, r.values()))  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key) and len(want) == 399
    got_steps = pa.Table.from_batches(batches["steps"]).select(["step", "start_ns", "duration_ns"]).to_pylist()
    assert [tuple(r.values()) for r in got_steps] == steps and len(steps) == 3


@pytest.mark.slow  # HTA parses each trace with pandas: seconds a file
@pytest.mark.filterwarnings("ignore:The inplace keyword")  # inside HTA
def test_hta_reads_the_export_as_the_raw_trace(tmp_path):
    """HTA, a Kineto consumer of its own, gives the same GPU kernel and temporal breakdowns
    on the export as on the raw trace (ts relative to baseTimeNanoseconds, as Kineto
    writes them: HTA's float64 µs keep the ns, and its ns rounding lands alike)."""
    import logging
    import shutil

    raw_trace = DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
    (tmp_path / "raw").mkdir()
    (tmp_path / "exp").mkdir()
    shutil.copy(raw_trace, tmp_path / "raw")
    assert ingest([raw_trace], tmp_path / "wh", run_id="a").ok
    export_chrome(tmp_path / "wh", "a", tmp_path / "exp" / "a.json.gz")
    logging.disable(logging.WARNING)  # HTA logs every file it parses
    try:
        from hta.trace_analysis import TraceAnalysis

        got = []
        for d in ("raw", "exp"):
            t = TraceAnalysis(trace_dir=str(tmp_path / d))
            kernel_types, _ = t.get_gpu_kernel_breakdown(visualize=False)
            got.append((kernel_types.to_dict("records"), t.get_temporal_breakdown(visualize=False).to_dict("records")))
    finally:
        logging.disable(logging.NOTSET)
    assert got[1] == got[0]
    assert {r["kernel_type"]: r["sum"] for r in got[0][0]} == {"COMPUTATION": 123557, "MEMORY": 425}


# ---- exact round trip, every fixture format ------------------------------------------------

ROUND_TRIP = {  # scenario -> its source format(s), the tables it fills
    "kineto_h200_annotated": "kineto",
    "hta_nccl_two_ranks": "kineto",  # two ranks, two files: correlation ids repeat across files
    "hta_mtia_inference": "kineto",
    "hta_rocm_mi250": "kineto",
    "hta_old_schema": "kineto",
    "tf_stepstats_gpu_streams": "tf_stepstats",
    "tf_runmetadata_text": "tf_stepstats",
    "megengine_graph_profile": "megengine",
    "xspace_jax_h200": "xspace",
    "chrome_trace_tf_timeline": "chrome_trace",
    "nsys_nvfuser_h200": "nsys",  # NVTX ranges as annotations; the .nsys-rep beside it is skipped
    "nsys_saxpy_mpi_a100": "nsys",  # nsys 2022 schema 2.9, MPI ranks
    "jax_profile_folder": "xspace",  # a JAX log dir: the xplane.pb (its JSON renderings are not read twice)
}


def _tables(wh: Path) -> dict[str, list[tuple]]:
    """Every source table's rows, every column but run_id (one connection for them all)."""
    con = catalog.connect(wh)
    try:
        return {table: con.execute(f"SELECT {', '.join(c for c in sch.names if c != 'run_id')} FROM {table} "
                                   "ORDER BY ALL").fetchall()
                for table, sch in schema.SOURCE_TABLES.items()}
    finally:
        con.close()


@pytest.mark.parametrize("scenario", sorted(ROUND_TRIP))
def test_round_trip_is_exact(scenario, tmp_path):
    """Export then ingest gives back every row of every table, every column but run_id
    (source_format and source_file included: they name the original trace)."""
    src, back, out = tmp_path / "src", tmp_path / "back", tmp_path / "t.json.gz"
    assert ingest([DATA / scenario], src, run_id="a").ok
    export_chrome(src, "a", out)
    summary = ingest([out], back, run_id="b")
    assert summary.ok, summary.errors
    con = catalog.connect(back)
    try:
        assert con.execute("SELECT formats FROM runs").fetchone()[0] == ["tracedb_export"]
    finally:
        con.close()
    filled = set()
    src_rows, back_rows = _tables(src), _tables(back)
    for table in schema.SOURCE_TABLES:
        before, after = src_rows[table], back_rows[table]
        assert len(after) == len(before), table
        assert after == before, table
        if before:
            filled.add(table)
    assert filled & {"nodes", "kernels"}
    formats = {r[-2] for t in filled for r in back_rows[t]}
    assert formats == set(ROUND_TRIP[scenario].split(","))


def test_round_trip_counts_from_the_raw_kineto_trace(kineto_export, tmp_path):
    """The issue's complaint, against the raw file: every GPU activity, op, runtime call
    (with its duration), memory event, annotation and step comes back."""
    from rawtrace import kineto_table, load_json_trace, us_ns

    wh, out = kineto_export
    back = tmp_path / "back"
    assert ingest([out], back, run_id="again").ok
    raw = load_json_trace(KINETO)["traceEvents"]
    want = collections.Counter(map(kineto_table, raw))
    steps = sorted(e["name"] for e in raw if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#"))
    call_ns = sum(us_ns(e["dur"]) for e in raw if kineto_table(e) == "runtime_calls")
    con = catalog.connect(back)
    try:
        for table in ("nodes", "kernels", "runtime_calls", "annotations", "allocations"):
            assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == want[table], table
        assert con.execute("SELECT sum(duration_ns) FROM runtime_calls").fetchone()[0] == call_ns
        assert [r[0] for r in con.execute("SELECT name FROM steps ORDER BY name").fetchall()] == steps
    finally:
        con.close()


def test_export_untimed_run_is_refused(tmp_path):
    from typer.testing import CliRunner

    from tracedb.cli import app

    wh = tmp_path / "wh"
    assert ingest([DATA / "node_shape_dump"], wh, run_id="dump").ok
    with pytest.raises(TracedbError, match=r"run 'dump' has no timed events \(node_dump record no times\)"):
        export_chrome(wh, "dump", tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
    r = CliRunner().invoke(app, ["export", "--run", "dump", "-o", str(tmp_path / "x.json"), "-w", str(wh)])
    assert r.exit_code == 2 and "has no timed events" in r.output


def test_reader_rejects_a_newer_or_broken_export(tmp_path):
    from tracedb.errors import TraceFormatError
    from tracedb.formats import detect, tracedb_export
    from tracedb.formats.base import ReadContext

    def read(doc: dict) -> None:
        path = tmp_path / "t.json"
        path.write_text(json.dumps(doc))
        assert detect(path).NAME == "tracedb_export"
        list(tracedb_export.read(path, ReadContext("r", "t.json")))

    ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2,
          "args": {"tracedb": {"table": "kernels", "device": "GPU:0"}}}
    read({"tracedbExport": {"version": 1}, "traceEvents": [ev]})
    with pytest.raises(TraceFormatError, match="version 99"):
        read({"tracedbExport": {"version": 99}, "traceEvents": [ev]})
    bad = {**ev, "args": {"tracedb": {"table": "kernels", "colour": "red"}}}
    with pytest.raises(TraceFormatError, match="kernels has no column 'colour'"):
        read({"tracedbExport": {"version": 1}, "traceEvents": [bad]})
    with pytest.raises(TraceFormatError, match="'nope' is no table"):
        read({"tracedbExport": {"version": 1}, "traceEvents": [{**ev, "args": {"tracedb": {"table": "nope"}}}]})


# ---- native Perfetto trace ------------------------------------------------------------------


class _Decoded:
    """A Perfetto trace parsed with Perfetto's own protos (the `perfetto` package): tracks,
    slices rebuilt from their begin/end pairs, instants, counters, flows."""

    def __init__(self, path: Path):
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

        trace = pb.Trace.FromString(path.read_bytes())
        self.tracks: dict[int, object] = {}
        self.slices: list[dict] = []  # name, cat, start, dur, track, flows
        self.instants: list[tuple] = []
        self.counters: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
        self.nesting_errors = 0
        open_: dict[int, list[dict]] = collections.defaultdict(list)
        last_ts: dict[int, int] = {}
        E = pb.TrackEvent
        for p in trace.packet:
            if p.HasField("track_descriptor"):
                self.tracks[p.track_descriptor.uuid] = p.track_descriptor
            if not p.HasField("track_event"):
                continue
            e, uuid = p.track_event, p.track_event.track_uuid
            assert uuid in self.tracks  # described before use
            if e.type in (E.TYPE_SLICE_BEGIN, E.TYPE_SLICE_END):
                assert p.timestamp >= last_ts.get(uuid, 0)  # a track's events in time order
                last_ts[uuid] = p.timestamp
            if e.type == E.TYPE_SLICE_BEGIN:
                s = {"name": e.name, "cat": e.categories[0], "start": p.timestamp, "track": uuid,
                     "flows": list(e.flow_ids)}
                if open_[uuid] and open_[uuid][-1]["end_max"] < p.timestamp:
                    self.nesting_errors += 1
                s["end_max"] = open_[uuid][-1]["end_max"] if open_[uuid] else 2**64
                open_[uuid].append(s)
            elif e.type == E.TYPE_SLICE_END:
                s = open_[uuid].pop()
                s["dur"] = p.timestamp - s["start"]
                self.slices.append(s)
            elif e.type == E.TYPE_INSTANT:
                self.instants.append((e.name, p.timestamp))
            elif e.type == E.TYPE_COUNTER:
                self.counters[uuid].append((p.timestamp, e.counter_value))
        assert not any(open_.values())

    def track_name(self, uuid: int) -> str:
        t = self.tracks[uuid]
        return t.thread.thread_name if t.HasField("thread") else t.name

    def process_of(self, uuid: int) -> str:
        t = self.tracks[uuid]
        if t.HasField("thread"):
            return next(d.process.process_name for d in self.tracks.values()
                        if d.HasField("process") and d.process.pid == t.thread.pid)
        return self.tracks[t.parent_uuid].process.process_name

    def of(self, *cats: str) -> list[tuple]:
        return sorted((s["name"], s["start"], s["dur"]) for s in self.slices if s["cat"] in cats)


def _warehouse_rows(wh: Path, sql: str) -> list[tuple]:
    con = catalog.connect(wh)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


def test_perfetto_xspace_every_kernel_and_op_overlaps_kept(warehouse, tmp_path):
    from tracedb.api import Warehouse

    out = tmp_path / "jax.pftrace"
    n = Warehouse(warehouse).export_perfetto(RUN, out)
    t = _Decoded(out)
    assert n == 30 + 158 + 20 and t.nesting_errors == 0
    kernels = t.of("kernel")
    assert kernels == _warehouse_rows(warehouse, "SELECT name, start_ns, duration_ns FROM kernels")
    assert len(kernels) == 30 and sum(k[2] for k in kernels) == 3_910_125
    ops = t.of("cpu_op")
    # the timed nodes (the XLA ops on the GPU are untimed: their time is their kernels')
    assert ops == _warehouse_rows(warehouse, "SELECT node_name, start_ns, duration_ns FROM nodes WHERE start_ns IS NOT NULL")
    assert len(ops) == 158 and sum(o[2] for o in ops) == 73_314_496
    # CUDA-graph kernels overlap on stream 14: the overlapping ones go to extra tracks of it
    streams = collections.Counter(t.track_name(s["track"]) for s in t.slices if s["cat"] == "kernel")
    assert set(streams) >= {"stream 14", "stream 14 (2)"} and sum(streams.values()) == 30
    assert {t.process_of(s["track"]) for s in t.slices if s["cat"] == "kernel"} == {"GPU:0"}
    hosts = {t.track_name(s["track"]) for s in t.slices if s["cat"] == "cpu_op"}
    assert {"python3 (thread id -4764611979263629758)", "Host Threads/635"} <= hosts
    # every kernel's flow starts at its launch event (cuGraphLaunch, same correlation id)
    starts = {f: s for s in t.slices if s["cat"] == "cpu_op" for f in s["flows"]}
    for k in (s for s in t.slices if s["cat"] == "kernel"):
        assert len(k["flows"]) == 1 and starts[k["flows"][0]]["name"] == "cuGraphLaunch (CudaGraph:2)"
    # memory in use: the allocator's bytes_allocated after each event
    (values,) = t.counters.values()
    assert len(values) == 20 and max(v for _, v in values) == 134_218_240


def test_perfetto_kineto_against_the_raw_trace(kineto_export, tmp_path):
    """Kernels, ops, runtime calls, counters and launch flows, from the raw JSON."""
    from rawtrace import kineto_cat, kineto_table, load_json_trace, us_ns

    wh, _ = kineto_export
    out = tmp_path / "torch.pftrace.gz"
    from tracedb.export_perfetto import export_perfetto

    export_perfetto(wh, "torch", out)
    import gzip

    plain = tmp_path / "torch.pftrace"
    plain.write_bytes(gzip.decompress(out.read_bytes()))
    t = _Decoded(plain)
    assert t.nesting_errors == 0
    doc = load_json_trace(KINETO)
    base = int(doc["baseTimeNanoseconds"])
    raw = doc["traceEvents"]

    def spans(table: str) -> list[tuple]:
        return sorted((e["name"], base + us_ns(e["ts"]), us_ns(e["dur"])) for e in raw if kineto_table(e) == table)

    assert t.of("kernel", "gpu_memcpy", "gpu_memset") == spans("kernels") and len(spans("kernels")) == 399
    assert t.of("cpu_op") == spans("nodes") and len(spans("nodes")) == 3138
    assert t.of("cuda_runtime", "cuda_driver") == spans("runtime_calls")
    # one track per stream, named by the raw streams
    streams = {(t.process_of(s["track"]), t.track_name(s["track"]).split(" (")[0])
               for s in t.slices if s["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")}
    assert streams == {(f"GPU:{e['args']['device']}", f"stream {e['args']['stream']}")
                       for e in raw if kineto_table(e) == "kernels"}
    # launch -> activity flows: each activity carries the flow id of the call with its correlation
    calls = {e["args"]["correlation"]: (e["name"], base + us_ns(e["ts"])) for e in raw
             if kineto_table(e) == "runtime_calls" and "correlation" in e.get("args", {})}
    by_flow = {f: (s["name"], s["start"]) for s in t.slices if s["cat"].startswith("cuda_") for f in s["flows"]}
    launched = sorted(calls[e["args"]["correlation"]] for e in raw
                      if kineto_table(e) == "kernels" and e["args"].get("correlation") in calls)
    got = sorted(by_flow[f] for s in t.slices if s["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
                 for f in s["flows"])
    assert got == launched and len(launched) == 399
    # memory counters: each device's Total Allocated after each [memory] event, in time order
    want = collections.defaultdict(list)
    for e in sorted((e for e in raw if kineto_table(e) == "allocations"), key=lambda e: us_ns(e["ts"])):
        want["GPU:0" if e["args"]["Device Type"] == 1 else "CPU:0"].append(
            (base + us_ns(e["ts"]), e["args"]["Total Allocated"]))
    got_counters = {t.process_of(uuid): sorted(v) for uuid, v in t.counters.items()}
    assert got_counters == {d: sorted(v) for d, v in want.items()} and sum(map(len, want.values())) == 1008
    assert all(kineto_cat(e) != "launch" for e in raw)


def test_perfetto_cli(tmp_path, warehouse):
    from typer.testing import CliRunner

    from tracedb.cli import app

    out = tmp_path / "jax.pftrace"
    r = CliRunner().invoke(app, ["export", "--run", RUN, "-f", "perfetto", "-o", str(out), "-w", str(warehouse)])
    assert r.exit_code == 0, r.output
    assert "wrote 208 events" in r.output and len(_Decoded(out).of("kernel")) == 30
    r = CliRunner().invoke(app, ["export", "--run", RUN, "-f", "svg", "-o", str(out), "-w", str(warehouse)])
    assert r.exit_code == 2 and "supported: chrome, perfetto" in r.output
