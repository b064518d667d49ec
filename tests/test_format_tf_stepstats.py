"""TF RunMetadata / StepStats reader.

Expected numbers were worked out from the text files with plain grep/regex, not with
the reader: e.g. seed 001's numbered-stream blocks (`/device:GPU:0/stream:<digits>`)
hold 755 node_stats, 26 of them with a `MEMCPY...` label (11 HtoD, 8 DtoH, 7 DtoD),
and their all_end_rel_micros sum to 7590; the `:MatMul` rows are 83, 3071 µs.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from google.protobuf import text_format

from tracedb.errors import TraceFormatError
from tracedb.formats import detect, tf_stepstats
from tracedb.formats.base import ReadContext, read_head
from tracedb.proto import run_metadata_pb2, step_stats_pb2, types_pb2

DATA = Path(__file__).parent / "data"
RUNMETA = DATA / "tf_runmetadata_text" / "000_6b18107121892edf.txt"
STREAMS = DATA / "tf_stepstats_gpu_streams" / "001_5e9237699abafb68.txt"


def read_tables(path: Path, ordinal: int = 0) -> dict[str, pa.Table]:
    batches: dict[str, list[pa.RecordBatch]] = {}
    for table, batch in tf_stepstats.read(path, ReadContext("run", path.name, file_ordinal=ordinal)):
        batches.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b) for t, b in batches.items()}


def counts(col) -> dict:
    return dict(Counter(col.to_pylist()))


def binary_copy(text_path: Path, msg_cls) -> bytes:
    msg = msg_cls()
    text_format.Parse(text_path.read_text(), msg)
    return msg.SerializeToString()


@pytest.fixture(scope="module")
def runmeta() -> dict[str, pa.Table]:
    return read_tables(RUNMETA, ordinal=4)


@pytest.fixture(scope="module")
def streams() -> dict[str, pa.Table]:
    return read_tables(STREAMS)


# ---------------------------------------------------------------- RunMetadata text (000)


def test_runmetadata_counts(runmeta):
    nodes = runmeta["nodes"]
    assert nodes.num_rows == 292
    assert counts(nodes["device"]) == {"GPU:0": 283, "CPU:0": 9}
    assert runmeta["tensors"].num_rows == 285
    assert runmeta["allocations"].num_rows == 328
    assert "kernels" not in runmeta  # no stream devices in this trace
    assert set(nodes["step"].to_pylist()) == {4}  # step = file ordinal


def test_runmetadata_first_node(runmeta):
    # _SOURCE: all_start_micros 1552507523166505, op 2..4, all_end_rel 124, scheduled ...492
    row = runmeta["nodes"].slice(0, 1).to_pylist()[0]
    assert row["node_name"] == "_SOURCE"
    assert row["op_type"] == "NoOp"
    assert row["device_raw"] == "/job:localhost/replica:0/task:0/device:GPU:0"
    assert row["start_ns"] == 1552507523166505_000
    assert row["duration_ns"] == 124_000
    assert row["op_start_ns"] == 1552507523166507_000
    assert row["op_end_ns"] == 1552507523166509_000
    assert row["scheduled_ns"] == 1552507523166492_000


def test_runmetadata_largest_tensor(runmeta):
    t = runmeta["tensors"].sort_by([("requested_bytes", "descending")]).slice(0, 1).to_pylist()[0]
    assert t["node_name"] == "v/cg/affine0/weights"
    assert t["shape"] == [9216, 4096]
    assert t["requested_bytes"] == 150994944
    assert t["dtype"] == "float32"
    assert t["device"] == "GPU:0"


def test_runmetadata_tensor_fields(runmeta):
    # First output in the file: Const_1, DT_INT32 [1], 4/256 bytes, cuda_host_bfc id 35.
    t = runmeta["tensors"].slice(0, 1).to_pylist()[0]
    assert t["node_name"] == "tower_0/v/xentropy/sparse_softmax_cross_entropy_loss/Const_1"
    assert (t["slot"], t["dtype"], t["shape"]) == (0, "int32", [1])
    assert (t["requested_bytes"], t["allocated_bytes"]) == (4, 256)
    assert (t["allocator"], t["allocation_id"], t["ptr"]) == ("cuda_host_bfc", 35, 140294561467136)
    assert pc.sum(pc.equal(runmeta["tensors"]["dtype"], "float32")).as_py() == 158  # DT_FLOAT count


def test_runmetadata_allocations(runmeta):
    a = runmeta["allocations"]
    assert set(a["kind"].to_pylist()) <= {"alloc", "free"}
    kinds = a["kind"].to_pylist()
    sizes = a["bytes"].to_pylist()
    assert all((k == "free") == (b < 0) for k, b in zip(kinds, sizes))
    first = a.slice(0, 1).to_pylist()[0]
    assert first["ts_ns"] % 1000 == 0 and first["allocator"] and first["node_name"]


# ---------------------------------------------------------------- StepStats text (001)


def test_streams_counts(streams):
    assert streams["nodes"].num_rows == 577
    k = streams["kernels"]
    assert k.num_rows == 755
    assert counts(k["kind"]) == {"kernel": 729, "memcpy": 26}
    copies = k.filter(pc.equal(k["kind"], "memcpy"))
    assert counts(copies["copy_kind"]) == {"HtoD": 11, "DtoH": 8, "DtoD": 7}
    assert pc.sum(k["duration_ns"]).as_py() == 7_590_000
    mm = k.filter(pc.equal(k["name"], "MatMul"))
    assert mm.num_rows == 83
    assert pc.sum(mm["duration_ns"]).as_py() == 3_071_000


def test_streams_skip_all_and_memcpy(streams):
    k = streams["kernels"]
    raw = set(k["device_raw"].to_pylist())
    assert raw == {"/device:GPU:0/stream:13", "/device:GPU:0/stream:14", "/device:GPU:0/stream:15"}
    assert set(k["stream"].to_pylist()) == {13, 14, 15}
    keys = list(zip(k["node_name"].to_pylist(), k["name"].to_pylist(), k["start_ns"].to_pylist()))
    assert len(set(keys)) == len(keys)  # each GPU activity once


def test_streams_kernel_naming(streams):
    rows = streams["kernels"].to_pylist()
    # `edge_2141_Train/Model/Variable/read:MEMCPYDtoH`, "MEMCPYDtoH 4 bytes (Device to Pinned)"
    copy = next(r for r in rows if r["node_name"] == "edge_2141_Train/Model/Variable/read")
    assert (copy["kind"], copy["name"], copy["copy_kind"], copy["bytes"]) == ("memcpy", "MEMCPYDtoH", "DtoH", 4)
    assert copy["stream"] == 15 and copy["device"] == "GPU:0"
    # `Train/Model/gradients/.../Sum_grad/DynamicStitch:DynamicStitch`, 4 µs
    k = next(r for r in rows if r["node_name"] == "Train/Model/gradients/Train/Model/sequence_loss/Sum_grad/DynamicStitch")
    assert (k["kind"], k["name"], k["bytes"], k["duration_ns"]) == ("kernel", "DynamicStitch", None, 4000)
    assert k["start_ns"] == 1532145303704612_000


def test_streams_label_with_memory_prefix(streams):
    # "[cuda_host_bfc 0.5MB 0.5MB] Train/Model/embedding_lookup = GatherV2(a, b, c)"
    row = next(r for r in streams["nodes"].to_pylist() if r["node_name"] == "Train/Model/embedding_lookup")
    assert row["op_type"] == "GatherV2"
    assert row["inputs"] == ["Model/embedding/read", "Train/TrainInput/StridedSlice/_83",
                             "Train/Model/embedding_lookup/axis"]
    assert row["device"] == "CPU:0"


# ---------------------------------------------------------------- binary encodings


@pytest.mark.parametrize("path,cls", [(RUNMETA, run_metadata_pb2.RunMetadata), (STREAMS, step_stats_pb2.StepStats)])
def test_binary_and_gzip_equal_text(path, cls, tmp_path):
    data = binary_copy(path, cls)
    pb = tmp_path / "trace.pb"
    pb.write_bytes(data)
    gz = tmp_path / "trace.pb.gz"
    gz.write_bytes(gzip.compress(data))
    text_gz = tmp_path / "trace.txt.gz"
    text_gz.write_bytes(gzip.compress(path.read_bytes()))
    expected = read_tables(path)
    for p in (pb, gz, text_gz):
        assert tf_stepstats.sniff(read_head(p))
        assert detect(p) is tf_stepstats
        got = read_tables(p)
        assert got.keys() == expected.keys()
        for table in expected:
            assert got[table].equals(expected[table]), (p.name, table)


def test_truncated_binary_is_error(tmp_path):
    for path, cls in ((RUNMETA, run_metadata_pb2.RunMetadata), (STREAMS, step_stats_pb2.StepStats)):
        data = binary_copy(path, cls)
        cut = tmp_path / "cut.pb"
        cut.write_bytes(data[: len(data) // 2])
        assert tf_stepstats.sniff(read_head(cut))
        with pytest.raises(TraceFormatError, match="truncated"):
            read_tables(cut)
    # RunMetadata: one top-level field, so even a cut one byte short is caught.
    data = binary_copy(RUNMETA, run_metadata_pb2.RunMetadata)
    cut.write_bytes(data[:-1])
    with pytest.raises(TraceFormatError):
        read_tables(cut)


def test_truncated_text_is_error(tmp_path):
    for path in (RUNMETA, STREAMS):
        text = path.read_bytes()
        cut = tmp_path / "cut.txt"
        cut.write_bytes(text[: len(text) // 2])
        with pytest.raises(TraceFormatError, match="truncated"):
            read_tables(cut)


def test_truncated_gzip_is_error(tmp_path):
    gz = tmp_path / "cut.txt.gz"
    data = gzip.compress(RUNMETA.read_bytes())
    gz.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError):
        read_tables(gz)


# ---------------------------------------------------------------- sniff


def test_sniff_claims_tf_text_only():
    assert tf_stepstats.sniff(read_head(RUNMETA))
    assert tf_stepstats.sniff(read_head(STREAMS))
    others = [p for p in DATA.glob("*/*") if p.is_file() and p not in (RUNMETA, STREAMS)]
    assert len(others) >= 5
    for p in others:
        assert not tf_stepstats.sniff(read_head(p)), p


def test_sniff_leading_comments():
    assert tf_stepstats.sniff(b"# captured by bench.py\n\n  step_stats {\n  dev_stats {\n")
    assert tf_stepstats.sniff(b"\n# x\ndev_stats: {\n device: \"/job:a/device:CPU:0\"")


def test_sniff_rejects_junk():
    rng = random.Random(0)
    junk = [
        b"",
        b"   \n",
        json.dumps({"traceEvents": [], "step_stats": {}}).encode(),
        b'[{"dev_stats": 1}]',
        b"dev_stats_total = 3\n",
        b"node_stats {\n}\n",
        b"\n\n\n\n/job:x",
    ] + [rng.randbytes(256) for _ in range(200)] + [b"\n" + rng.randbytes(255) for _ in range(200)]
    for head in junk:
        assert not tf_stepstats.sniff(head), head[:40]


def test_not_tf_file_read_is_error(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"traceEvents": []}')
    with pytest.raises(TraceFormatError):
        read_tables(p)
    p.write_text("dev_stats {\n}\n")  # valid text, but nothing in it
    with pytest.raises(TraceFormatError, match="no node_stats"):
        read_tables(p)


# ---------------------------------------------------------------- units and details


def _tiny() -> step_stats_pb2.StepStats:
    ss = step_stats_pb2.StepStats()
    dev = ss.dev_stats.add(device="/job:worker/replica:0/task:1/device:GPU:1")
    n = dev.node_stats.add(node_name="a/mm", timeline_label="a/mm = MatMul(x, y, ^c)", thread_id=77)
    n.all_start_micros, n.all_start_nanos = 1000, 1_000_123
    n.op_start_rel_micros, n.op_start_rel_nanos = 1, 1_500
    n.op_end_rel_micros, n.op_end_rel_nanos = 3, 3_250
    n.all_end_rel_micros, n.all_end_rel_nanos = 4, 4_750
    n.scheduled_micros, n.scheduled_nanos = 999, 999_001
    dev.thread_names[77] = "tf_worker"
    out = n.output.add(slot=0)
    out.tensor_description.dtype = types_pb2.DT_HALF
    out.tensor_description.shape.dim.add(size=-1)
    out.tensor_description.shape.dim.add(size=8)
    # micros only: falls back to micros * 1000
    m = dev.node_stats.add(node_name="b", timeline_label="b", all_start_micros=5, all_end_rel_micros=2)
    rec = m.memory.add(allocator_name="GPU_1_bfc").allocation_records.add()
    rec.alloc_micros, rec.alloc_bytes = 6, -64
    streams = ss.dev_stats.add(device="/device:GPU:1/stream:7")
    streams.node_stats.add(node_name="b:MEMSET", timeline_label="MEMSET 128 bytes", all_start_nanos=10)
    ss.dev_stats.add(device="/device:GPU:1/stream:all").node_stats.add(node_name="b:MEMSET")
    return ss


def test_nanos_beat_micros(tmp_path):
    p = tmp_path / "tiny.pb"
    p.write_bytes(_tiny().SerializeToString())
    t = read_tables(p)
    a, b = t["nodes"].to_pylist()
    assert a["device"] == "GPU:1" and a["thread_id"] == 77
    assert a["start_ns"] == 1_000_123
    assert a["op_start_ns"] == 1_000_123 + 1_500
    assert a["op_end_ns"] == 1_000_123 + 3_250
    assert a["duration_ns"] == 4_750
    assert a["scheduled_ns"] == 999_001
    assert (a["op_type"], a["inputs"], a["control_inputs"]) == ("MatMul", ["x", "y"], ["c"])
    assert a["output_dtypes"] == ["float16"] and a["output_shapes"] == [[-1, 8]]
    assert json.loads(a["params"])["thread_name"] == "tf_worker"
    assert (b["start_ns"], b["duration_ns"], b["op_type"], b["inputs"]) == (5000, 2000, None, None)
    alloc = t["allocations"].to_pylist()[0]
    assert (alloc["ts_ns"], alloc["bytes"], alloc["kind"], alloc["node_name"]) == (6000, -64, "free", "b")
    (k,) = t["kernels"].to_pylist()  # the /stream:all repeat is skipped
    assert (k["kind"], k["bytes"], k["stream"], k["node_name"], k["start_ns"]) == ("memset", 128, 7, "b", 10)
    # text encoding of the same message reads the same
    txt = tmp_path / "tiny.txt"
    txt.write_text(text_format.MessageToString(_tiny()))
    t2 = read_tables(txt)
    assert all(t2[name].equals(t[name]) for name in t)


def test_warehouse_ingest(tmp_path):
    ingest = pytest.importorskip("tracedb.ingest")
    catalog = pytest.importorskip("tracedb.catalog")
    summary = ingest.ingest([STREAMS], tmp_path / "wh")
    assert not summary.errors
    con = catalog.connect(tmp_path / "wh")
    n, dur = con.execute(
        "select count(*), sum(duration_ns) from kernels where name = 'MatMul'").fetchone()
    assert (n, dur) == (83, 3_071_000)
    assert con.execute("select count(*) from nodes").fetchone()[0] == 577


@pytest.mark.parametrize("raw,expected", [
    ("/job:localhost/replica:0/task:0/device:GPU:0", ("GPU:0", None)),
    ("/device:GPU:2/stream:all", ("GPU:2", "all")),
    ("/job:localhost/replica:0/task:0/gpu:0", ("GPU:0", None)),  # pre-1.3 TF names
    ("/gpu:1/stream:12", ("GPU:1", "12")),
    ("/gpu:0/memcpy", ("GPU:0", "memcpy")),
])
def test_device_names(raw, expected):
    from tracedb.devices import parse_tf_device

    assert parse_tf_device(raw) == expected


def test_copy_names_are_the_copy_kind():
    """Seed 001 names 10 stream-13 copies `op:Pack:MEMCPYDtoD`; each copy's name is its kind.
    Counted with grep: 26 numbered-stream MEMCPY rows, 8 DtoH, 11 HtoD, 7 DtoD."""
    batches = [b for t, b in tf_stepstats.read(STREAMS, ReadContext("r", STREAMS.name)) if t == "kernels"]
    rows = pa.Table.from_batches(batches).to_pylist()
    copies = [r for r in rows if r["kind"] == "memcpy"]
    assert Counter(r["name"] for r in copies) == {"MEMCPYDtoH": 8, "MEMCPYHtoD": 11, "MEMCPYDtoD": 7}
    stack = [r for r in copies if r["node_name"] == "Train/Model/global_norm/stack"]
    assert len(stack) == 7 and {r["name"] for r in stack} == {"MEMCPYDtoD"}
