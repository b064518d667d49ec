"""Format detection is by content: every real trace under a meaningless name, bad files."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import data_files, SCENARIOS, scenario
from tracedb import catalog, formats
from tracedb.errors import TraceFormatError
from tracedb.ingest import ingest

ROOT = Path(__file__).resolve().parent.parent
DATA_ROOT = Path(__file__).parent / "data"

EXPECTED = {
    "tf_runmetadata_text": "tf_stepstats",
    "tf_stepstats_gpu_streams": "tf_stepstats",
    "node_shape_dump": "node_dump",
    "node_name_list": "node_list",
    "megengine_graph_profile": "megengine",
    "kineto_h200_fp32": "kineto",
    "xspace_jax_h200": "xspace",
}


def test_every_format_module_has_the_interface():
    mods = formats.all_formats()
    assert [m.NAME for m in mods] == formats.FORMAT_MODULES
    for m in mods:
        assert callable(m.sniff) and callable(m.read) and m.DESCRIPTION


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_real_trace_detected_under_meaningless_name(tmp_path, name):
    data = scenario(name).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    plain = tmp_path / "trace.bin"
    plain.write_bytes(data)
    assert formats.detect(plain).NAME == EXPECTED[name]
    zipped = tmp_path / "other.dat"
    zipped.write_bytes(gzip.compress(data))
    assert formats.detect(zipped).NAME == EXPECTED[name]


_JSON_FORMATS = {"tracedb_export", "chakra_et", "megengine", "kineto", "chrome_trace"}


def test_every_trace_is_claimed_by_json_formats_or_protobuf_ones_never_both():
    """Why the JSON formats may be sniffed before the protobuf ones (formats docstring):
    no real trace under tests/data is claimed by one of each."""
    from tracedb.formats.base import read_head

    seen = 0
    for path in sorted((DATA_ROOT).rglob("*")):
        if not path.is_file() or path.suffix in (".md", ".py", ".sql", ".csv", ".parquet"):
            continue
        head = read_head(path)
        names = {m.NAME for m in formats.all_formats() if head.strip() and m.sniff(head)}
        assert not (names & _JSON_FORMATS and names - _JSON_FORMATS), (path, names)
        seen += bool(names)
    assert seen >= 30


def test_a_head_both_could_claim_goes_to_the_json_reader(tmp_path):
    """A Chrome trace whose first key is a TF device name opens like TF binary (0x0A, a
    length, 0x0A, a length, then `/...:...`): both sniffs claim it; the JSON reader reads
    it (before the reorder, TF claimed it and fell back to it)."""
    trace = tmp_path / "odd.json"
    trace.write_bytes(b'\n{\n"/job:localhost/replica:0/task:0/device:GPU:0": 1, "traceEvents": ['
                      b'{"ph": "X", "name": "MatMul", "pid": 1, "tid": 2, "ts": 10, "dur": 5}]}')
    assert {m.NAME for m in formats.candidates(trace)} == {"chrome_trace", "tf_stepstats"}
    assert formats.detect(trace).NAME == "chrome_trace"
    summary = ingest([trace], tmp_path / "wh", run_id="odd")
    assert summary.ok
    con = catalog.connect(tmp_path / "wh")
    assert con.execute("SELECT node_name, duration_ns, source_format FROM nodes").fetchall() == [
        ("MatMul", 5000, "chrome_trace")]


def test_sniffing_imports_formats_up_to_the_claiming_one():
    """Detecting a Kineto trace imports neither the TF nor the XSpace reader, nor protobuf
    (~18 ms of a process's start-up); reading it neither."""
    code = (
        "import sys\n"
        "from tracedb import formats\n"
        "from tracedb.formats.base import ReadContext\n"
        f"path = __import__('pathlib').Path({str(scenario('kineto_h200_fp32'))!r})\n"
        "assert formats.detect(path).NAME == 'kineto'\n"
        "rows = sum(b.num_rows for _, b in formats.read(path, ReadContext('r', 'f', 0), 'kineto'))\n"
        "print(rows, sorted(m for m in sys.modules if m.startswith(('google', 'tracedb.formats.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split(" ", 1)
    assert int(out[0]) > 10000
    assert eval(out[1]) == ["tracedb.formats.base", "tracedb.formats.jsonstream",
                            "tracedb.formats.kineto", "tracedb.formats.megengine",
                            "tracedb.formats.tracedb_export"]


@pytest.mark.parametrize("content,message", [
    (b"", "empty file"),
    (b"\n\n  \n", "empty file"),
    (bytes((i * 7919 + 13) % 256 for i in range(5000)), "unknown format"),
    (b'{"hello": "world"}', "unknown format"),
])
def test_bad_files_leave_the_warehouse_as_it_was(tmp_path, content, message):
    wh = tmp_path / "wh"
    ingest([scenario("node_shape_dump")], wh, run_id="good")
    before = data_files(wh)
    bad = tmp_path / "trace.bin"
    bad.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message):
        formats.detect(bad)
    summary = ingest([bad], wh, run_id="good")  # same run id: must not wipe the good run
    [(path, err)] = summary.errors
    assert path.endswith("trace.bin") and message in err
    assert data_files(wh) == before
    con = catalog.connect(wh)
    assert con.execute("SELECT count(*) FROM nodes WHERE run_id = 'good'").fetchone()[0] == 178


def test_run_folder_may_mix_formats(tmp_path):
    run = tmp_path / "runs" / "resnet_job"
    run.mkdir(parents=True)
    shutil.copy(scenario("tf_runmetadata_text"), run / "step_0.pbtxt")
    shutil.copy(scenario("node_shape_dump"), run / "graph_nodes.txt")
    summary = ingest([tmp_path / "runs"], tmp_path / "wh")
    assert summary.ok
    con = catalog.connect(tmp_path / "wh")
    rows = con.execute("SELECT source_format, count(*) FROM nodes GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("node_dump", 178), ("tf_stepstats", 292)]
    assert con.execute("SELECT formats FROM runs").fetchone()[0] == ["node_dump", "tf_stepstats"]


def test_one_step_per_step_file_in_natural_order(tmp_path):
    run = tmp_path / "stepped"
    run.mkdir()
    for i in (1, 2, 10):  # plain name order would put 10 before 2
        shutil.copy(scenario("tf_runmetadata_text"), run / f"run_metadata_{i}.pbtxt")
    assert ingest([run], tmp_path / "wh", run_id="stepped").ok
    con = catalog.connect(tmp_path / "wh")
    rows = con.execute("SELECT source_file, step, count(*) FROM nodes GROUP BY 1, 2 ORDER BY 2").fetchall()
    assert rows == [("run_metadata_1.pbtxt", 0, 292), ("run_metadata_2.pbtxt", 1, 292),
                    ("run_metadata_10.pbtxt", 2, 292)]


def test_file_failing_after_batches_were_written_leaves_nothing(tmp_path):
    """A Kineto trace whose last kernel lacks 'ts': the reader has already streamed batches
    to staging when it fails; they must all go, and the run's previous data stay."""
    import json

    doc = json.loads(gzip.decompress(scenario("kineto_h200_fp32").read_bytes()))
    events = doc["traceEvents"] * 3  # > 16k cpu_op rows: at least one batch is flushed first
    last_kernel = max(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    events[last_kernel] = {k: v for k, v in events[last_kernel].items() if k != "ts"}
    doc["traceEvents"] = events
    bad = tmp_path / "rank0.json"
    bad.write_text(json.dumps(doc))
    wh = tmp_path / "wh"
    assert ingest([scenario("node_shape_dump")], wh, run_id="job").ok
    summary = ingest([bad], wh, run_id="job")
    [(path, err)] = summary.errors
    assert path.endswith("rank0.json") and "has no 'ts'" in err
    # the dump's one file (both devices), and its run's row of rollup_run_summary
    assert [p.split("/")[0] for p in data_files(wh)] == ["nodes", "rollup_run_summary"]
    assert not (wh / "_staging").exists()
    con = catalog.connect(wh)
    assert con.execute("SELECT count(*), min(source_format) FROM nodes").fetchone() == (178, "node_dump")
