"""Issue 13, findings 7, 10, 13 and 14: crafted bad inputs get the project's own errors,
naming the event or row and the field; gzip bombs stop at a configurable limit; impossible
values are counted per file as warnings; run ids and labels the warehouse cannot keep."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import DATA, scenario
from tracedb import Warehouse, formats
from tracedb.cli import app
from tracedb.errors import TracedbError, TraceFormatError, WarehouseError
from tracedb.formats.base import ReadContext
from tracedb.ingest import ingest

runner = CliRunner()
TIMELINE = DATA / "chrome_trace_tf_timeline" / "timeline_step0.json"
ROOT = Path(__file__).parent.parent


def _read(path: Path) -> int:
    mod = formats.detect(path)
    return sum(b.num_rows for _, b in mod.read(path, ReadContext("r", path.name)))


def _timeline() -> dict:
    return json.loads(TIMELINE.read_text())


def _kineto() -> dict:
    return json.loads(gzip.decompress(scenario("kineto_h200_fp32").read_bytes()))


def _megengine() -> dict:
    return json.loads(scenario("megengine_graph_profile").read_text())


def _landing(d: dict) -> list[dict]:
    """The timeline's X events that become rows: TF's `/stream:all` and `/memcpy` lanes
    repeat the numbered streams and are skipped (README, Formats)."""
    names = {e["pid"]: e["args"]["name"] for e in d["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    return [e for e in d["traceEvents"] if e.get("ph") == "X"
            and not re.search(r"stream:all|/memcpy", names.get(e.get("pid"), ""))]


def _first(events: list, **match) -> dict:
    return next(e for e in events if all(e.get(k) == v for k, v in match.items()))


def _set_timeline(key, value):
    d = _timeline()
    _first(d["traceEvents"], ph="X")[key] = value
    return json.dumps(d)


def _set_kineto(cat, key, value, in_args=False):
    d = _kineto()
    ev = _first(d["traceEvents"], cat=cat)
    (ev["args"] if in_args else ev)[key] = value
    return json.dumps(d)


def _megengine_with(fn):
    d = _megengine()
    fn(d)
    return json.dumps(d)


def _one(m: dict):
    return next(iter(m.values()))


def _deep_json(doc: str, anchor: str) -> str:
    return doc.replace(anchor, anchor + '"deep": ' + "[" * 100_000 + "]" * 100_000 + ", ", 1)


_TF = scenario("tf_runmetadata_text").read_text()

# (scenario name, file text, regex the one-line error must match). Each of these gave
# `unexpected <Type> while reading` before: OverflowError, ValueError, RecursionError.
CRAFTED = {
    "timeline_nan_ts": (lambda: _set_timeline("ts", float("nan")), r"Op event #13 \('NoOp'\) field ts: not a finite number: nan"),
    "timeline_inf_dur": (lambda: _set_timeline("dur", float("inf")), r"Op event #13 \('NoOp'\) field dur: not a finite number: inf"),
    "timeline_huge_ts": (lambda: _set_timeline("ts", 10**30),
                         r"nodes row #0 \(seq 13, node_name '_SOURCE'\): field start_ns = 1000+ is not a valid int64"),
    "timeline_deep": (lambda: _deep_json(TIMELINE.read_text(), '{"ph": "X", '), r"invalid JSON: value starting at char \d+ is nested too deeply"),
    "kineto_nan_dur": (lambda: _set_kineto("cpu_op", "dur", float("nan")),
                       r"cpu_op event #0 \('autograd::engine::evaluate_function: NllLossBackward0'\) field dur: not a finite number"),
    "kineto_nan_ts": (lambda: _set_kineto("kernel", "ts", float("nan")), r"kernel event #8457 \(.*\) field ts: not a finite number"),
    "kineto_nan_device": (lambda: _set_kineto("kernel", "device", float("nan"), True),
                          r"kernel event #8457 \(.*\) field args\.device: ValueError: cannot convert float NaN"),
    "kineto_huge_dur": (lambda: _set_kineto("kernel", "dur", 10**30), r"kernels row #0 \(name .*\): field duration_ns = 1000+ is not a valid int64"),
    "kineto_huge_grid": (lambda: _set_kineto("kernel", "grid", [10**30, 1, 1], True), r"kernels row #0 \(name .*\): field grid = \[1000+, 1, 1\] is not a valid list"),
    "megengine_huge_chunk": (lambda: _megengine_with(lambda d: _one(d["graph_exec"]["mem_chunk"]).__setitem__("size", 10**30)),
                             r"tensors row #\d+ \(node_name .*\): field allocated_bytes = 1000+ is not a valid int64"),
    "megengine_deep": (lambda: _deep_json(scenario("megengine_graph_profile").read_text(), '"graph_exec": {'),
                       r"MegEngine profile is not valid JSON: value starting at char \d+ is nested too deeply"),
    "megengine_nan_time": (lambda: _megengine_with(lambda d: _one(_one(d["profiler"]["host"])).__setitem__("start", float("nan"))),
                           r"MegEngine profile: malformed operator \d+ \(ValueError"),
    # found by tests/test_fuzz.py (long profile): an Infinity time is an OverflowError in int()
    "megengine_inf_time": (lambda: _megengine_with(lambda d: _one(_one(d["profiler"]["host"])).__setitem__("end", float("inf"))),
                           r"MegEngine profile: malformed operator \d+ \(OverflowError: cannot convert float infinity"),
    "tf_huge_start": (lambda: re.sub(r"all_start_micros: \d+", "all_start_micros: 9223372036854775807", _TF, count=1),
                      r"nodes row #0 \(seq 0, node_name '_SOURCE'\): field start_ns = 9223372036854775807000 is not a valid int64"),
    "tf_huge_alloc": (lambda: re.sub(r"alloc_micros: \d+", "alloc_micros: 9223372036854775807", _TF, count=1),
                      r"allocations row #0 \(node_name .*\): field ts_ns = \d+ is not a valid int64"),
    # `<>` delimiters send the text to text_format.Parse (pbtext's fast path skips deep `{}`
    # nesting of an unknown field without recursing, and reads such a file)
    "tf_deep": (lambda: _TF.replace("step_stats {", "step_stats {" + "zzz <" * 20000 + ">" * 20000, 1),
                r"bad TF text protobuf: messages nested too deeply"),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_inputs_name_event_and_field(tmp_path, name):
    make, pattern = CRAFTED[name]
    path = tmp_path / f"{name}.txt"
    path.write_text(make())
    with pytest.raises(TraceFormatError) as err:
        _read(path)
    msg = str(err.value)
    assert re.search(pattern, msg), msg
    assert "\n" not in msg


def test_crafted_inputs_in_one_batch_are_recorded_and_good_files_land(tmp_path):
    run = tmp_path / "runs" / "mixed"
    run.mkdir(parents=True)
    for name in ("timeline_nan_ts", "kineto_huge_dur", "tf_deep"):
        (run / f"{name}.txt").write_text(CRAFTED[name][0]())
    (run / "good.json").write_text(TIMELINE.read_text())
    summary = ingest([tmp_path / "runs"], tmp_path / "wh")
    errors = dict(summary.errors)
    assert len(errors) == 3 and not any("unexpected" in e for e in errors.values()), errors
    good = [f for f in summary.runs[0].files if f.ok]
    assert [f.rel for f in good] == ["good.json"]
    assert sum(good[0].rows.values()) == len(_landing(_timeline())) == 13


# ---- error families -------------------------------------------------------------------

def test_warehouse_errors_are_not_blamed_on_the_source(tmp_path):
    """A staging write that fails (file-size limit: EFBIG) is a WarehouseError, prefixed
    `warehouse error:`; the same file reads fine when the disk lets it."""
    wh = tmp_path / "wh"
    assert Warehouse(wh).ingest(TIMELINE, run_id="small").ok  # the catalog exists already
    script = f"""
import resource, signal, sys
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from tracedb.ingest import ingest
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
errors = []
try:
    ingest([Path({str(scenario('kineto_h200_fp32'))!r})], Path({str(wh)!r}), run_id="big",
           on_file=lambda f: errors.append(f.error))
except Exception as e:
    pass
print(errors[0])
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("warehouse error: cannot write "), out.stdout + out.stderr
    assert "File too large" in line


def test_error_types():
    assert issubclass(WarehouseError, TracedbError) and not issubclass(WarehouseError, TraceFormatError)
    assert str(WarehouseError("disk full")) == "warehouse error: disk full"
    assert str(TraceFormatError("bad")) == "bad"


# ---- finding 10: gzip bombs -------------------------------------------------------------

def _bomb(head: str, pad_mb: int) -> bytes:
    """A valid document whose gzip is tiny and whose text is `pad_mb` MB of whitespace."""
    body = head.rstrip()
    pad = b" " * (1 << 20)
    z = gzip.compress(body[:-1].encode() + b"".join([pad] * pad_mb) + body[-1:].encode(), compresslevel=9)
    return z


@pytest.mark.parametrize("name,head,env", [
    ("megengine", scenario("megengine_graph_profile").read_text(), "TRACEDB_MAX_DECOMPRESSED_BYTES"),
    ("tf_text", _TF + "\n#", "TRACEDB_MAX_DECOMPRESSED_BYTES"),
    ("kineto", gzip.decompress(scenario("kineto_h200_fp32").read_bytes()).decode(), "TRACEDB_MAX_DECOMPRESSED_BYTES"),
    ("node_dump", scenario("node_shape_dump").read_text() + "\n#", "TRACEDB_MAX_DECOMPRESSED_BYTES"),
])
def test_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch, name, head, env):
    path = tmp_path / f"{name}.gz"
    path.write_bytes(_bomb(head, 64))
    assert path.stat().st_size < 1 << 20  # 64 MB of text in well under 1 MB
    monkeypatch.setenv(env, "8M")
    with pytest.raises(TraceFormatError, match=rf"(decompresses to more than 8 MiB|line 1 is longer).*{env}|longer than 16 MiB"):
        _read(path)


def test_gzip_bomb_in_a_batch_is_one_named_error_and_good_runs_land(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    (runs / "bomb").mkdir(parents=True)
    (runs / "good").mkdir()
    (runs / "bomb" / "profile.json.gz").write_bytes(_bomb(scenario("megengine_graph_profile").read_text(), 40))
    (runs / "good" / "timeline.json").write_text(TIMELINE.read_text())
    monkeypatch.setenv("TRACEDB_MAX_DECOMPRESSED_BYTES", "16M")
    result = runner.invoke(app, ["ingest", str(runs), "-w", str(tmp_path / "wh")])
    assert result.exit_code == 1
    assert re.search(r"error: \S*bomb/profile\.json\.gz: decompresses to more than 16 MiB \(a gzip bomb\?\); "
                     r"stopped after \d+ bytes; raise TRACEDB_MAX_DECOMPRESSED_BYTES to read it", result.output), result.output
    assert "good: 1/1 files" in result.output
    n = Warehouse(tmp_path / "wh").sql("SELECT (SELECT count(*) FROM nodes WHERE run_id = 'good') "
                                       "+ (SELECT count(*) FROM kernels WHERE run_id = 'good') n").to_pylist()[0]["n"]
    assert n == len(_landing(_timeline())) == 13


def test_plain_file_over_the_whole_file_limit(tmp_path, monkeypatch):
    """TF text streams (pbtext, chunk by chunk): the whole-file limit only bounds what
    text_format, pbtext's fallback for syntax outside its subset, reads whole."""
    path = tmp_path / "big.txt"
    path.write_text(_TF)
    rows = _read(path)
    monkeypatch.setenv("TRACEDB_MAX_WHOLE_FILE_BYTES", "100K")
    assert path.stat().st_size > 100 << 10 and _read(path) == rows > 0
    # A field separator (`;`) is outside pbtext's subset: text_format reads the whole file.
    odd = _TF.replace('"\n', '";\n', 1)
    assert _TF.count('"\n') > 1 and odd != _TF
    path.write_text(odd)
    with pytest.raises(TraceFormatError, match=r"^TF text protobuf uses syntax outside what tracedb streams \(pbtext\), "
                                               r"which is parsed whole, and the file is too large for that: \d+ bytes "
                                               r"is more than the 100 KiB this format reads into memory"):
        _read(path)
    monkeypatch.delenv("TRACEDB_MAX_WHOLE_FILE_BYTES")
    assert _read(path) == rows
    monkeypatch.setenv("TRACEDB_MAX_WHOLE_FILE_BYTES", "lots")
    with pytest.raises(TracedbError, match="expected a positive size in bytes"):
        _read(path)


# ---- finding 7: validation policy -------------------------------------------------------

def _file_warnings(wh: Path, run_id: str) -> dict:
    """The file's warnings: a `warnings` column of `files` where there is one, else the
    `warnings` key of `files.metadata`."""
    row = Warehouse(wh).sql("SELECT * FROM files WHERE run_id = $r", r=run_id).to_pylist()[0]
    if row.get("warnings"):
        return json.loads(row["warnings"])
    return json.loads(row["metadata"] or "{}").get("warnings", {})


def test_negative_duration_is_counted_and_null(tmp_path):
    d = _timeline()
    xs = _landing(d)
    xs[1]["dur"], xs[2]["dur"] = -5, -1
    path = tmp_path / "neg.json"
    path.write_text(json.dumps(d))
    wh = tmp_path / "wh"
    assert Warehouse(wh).ingest(path, run_id="neg").ok
    assert _file_warnings(wh, "neg") == {"negative_duration": 2}
    rows = Warehouse(wh).sql(
        "SELECT count(*) n, count(duration_ns) timed, min(duration_ns) lo FROM "
        "(SELECT duration_ns FROM nodes UNION ALL SELECT duration_ns FROM kernels)").to_pylist()[0]
    assert rows == {"n": 13, "timed": 11, "lo": min(e["dur"] for e in xs if e["dur"] >= 0) * 1000}


def test_unknown_device_never_becomes_gpu0(tmp_path):
    base, bad = tmp_path / "base.json", tmp_path / "zero.json"
    base.write_text(json.dumps(_kineto()))
    bad.write_text(_set_kineto("kernel", "device", "zero", in_args=True))
    wh = tmp_path / "wh"
    assert Warehouse(wh).ingest(base, run_id="base").ok and Warehouse(wh).ingest(bad, run_id="zero").ok
    count = "SELECT device, device_raw, count(*) n FROM kernels WHERE run_id = $r GROUP BY ALL ORDER BY device"
    before = Warehouse(wh).sql(count, r="base").to_pylist()
    after = Warehouse(wh).sql(count, r="zero").to_pylist()
    assert [r["device"] for r in before] == ["GPU:0"]
    assert after == [{"device": "GPU:0", "device_raw": "GPU 0", "n": before[0]["n"] - 1},
                     {"device": "UNKNOWN:0", "device_raw": "GPU zero", "n": 1}]
    assert _file_warnings(wh, "zero") == {"unknown_device": 1} and _file_warnings(wh, "base") == {}


def test_duplicated_events_are_counted(tmp_path):
    d = _timeline()
    xs = _landing(d)
    d["traceEvents"] += [dict(xs[0]), dict(xs[0]), dict(xs[5])]
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(d))
    wh = tmp_path / "wh"
    result = runner.invoke(app, ["ingest", str(path), "--run-id", "dup", "-w", str(wh)])
    assert result.exit_code == 0, result.output
    assert "warning: " in result.output and "3 duplicate_event" in result.output
    assert _file_warnings(wh, "dup") == {"duplicate_event": 3}
    n = Warehouse(wh).sql("SELECT (SELECT count(*) FROM nodes) + (SELECT count(*) FROM kernels) n").to_pylist()[0]["n"]
    assert n == len(xs) + 3  # kept, as documented


def test_clean_seeds_have_no_warnings(seed_warehouse):
    rows = Warehouse(seed_warehouse).sql("SELECT run_id FROM files").to_pylist()
    assert len(rows) == 7
    assert all(_file_warnings(seed_warehouse, r["run_id"]) == {} for r in rows)


# ---- finding 14: names the warehouse cannot keep ------------------------------------------

@pytest.mark.parametrize("run_id", ["", "   ", "__HIVE_DEFAULT_PARTITION__"])
def test_run_ids_refused(tmp_path, run_id):
    r = runner.invoke(app, ["ingest", str(TIMELINE), "--run-id", run_id, "-w", str(tmp_path / "wh")])
    assert r.exit_code == 2 and "run id" in r.output
    assert not (tmp_path / "wh").exists()


def test_hive_default_partition_folder_refused(tmp_path):
    runs = tmp_path / "runs"
    (runs / "__HIVE_DEFAULT_PARTITION__").mkdir(parents=True)
    (runs / "__HIVE_DEFAULT_PARTITION__" / "t.json").write_text(TIMELINE.read_text())
    with pytest.raises(TracedbError, match="Hive partitioning reads it as NULL"):
        ingest([runs], tmp_path / "wh")


def test_label_key_with_a_newline_reads_back(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "t.json").write_text(TIMELINE.read_text())
    labels = {"multi\nline": "a", "tab\tkey": "b", 'quo"te': "c", "back\\slash": "d", "ctl\x01": "e"}
    (run / "run.json").write_text(json.dumps(labels))
    wh = tmp_path / "wh"
    assert ingest([tmp_path / "runs"], wh).ok
    cols = ", ".join('"' + k.replace('"', '""') + '"' for k in labels)
    got = Warehouse(wh).sql(f"SELECT {cols} FROM runs").to_pylist()
    assert got == [labels]


@pytest.mark.parametrize("command", [["vacuum"], ["rm", "r1"]])
def test_mistyped_warehouse_is_not_created(tmp_path, command):
    missing = tmp_path / "typo"
    r = runner.invoke(app, [*command, "-w", str(missing)])
    assert r.exit_code == 2 and f"no warehouse at {missing}" in r.output
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    r = runner.invoke(app, [*command, "-w", str(empty)])
    assert r.exit_code == 2 and "no warehouse at" in r.output
    assert list(empty.iterdir()) == []
