"""Run discovery on real folder layouts: nested run folders, an XProf profile folder with
its renderings, TF .pb + .pbtxt twins, symlink loops, unreadable folders and files, and
names that are not UTF-8. Expected numbers come from the raw traces (no tracedb code)."""

from __future__ import annotations

import builtins
import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format

from conftest import DATA, scenario
from tracedb import catalog
from tracedb.discover import describe, discover_runs
from tracedb.errors import TracedbError
from tracedb.ingest import ingest

JAX_LOGDIR = DATA / "jax_profile_folder"
SESSION = "2026_11_26_04_20_26"
DUMP_NODES = 178  # lines of the node_shape_dump seed
NAMES_NODES = 2467  # lines of the node_name_list seed
TF_TEXT_NODES = 292  # host node_stats of the tf_runmetadata_text seed


def _jax_raw() -> tuple[int, int, int]:
    """(GPU events, their total ns, host X events) of the session, from the raw JSON."""
    events = json.loads(gzip.decompress(
        (JAX_LOGDIR / "plugins" / "profile" / SESSION / "vm.trace.json.gz").read_bytes()))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    gpu = [e for e in events if e.get("ph") == "X" and names[e["pid"]].startswith("/device:GPU")]
    host = [e for e in events if e.get("ph") == "X" and names[e["pid"]] == "/host:CPU"]
    return len(gpu), round(sum(e["dur"] for e in gpu) * 1000), len(host)


def _q(wh: Path, sql: str, params=None):
    con = catalog.connect(wh)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_jax_profile_folder_is_one_run_read_once(tmp_path):
    n_gpu, gpu_ns, n_host = _jax_raw()
    assert (n_gpu, gpu_ns, n_host) == (48, 1_591_723, 128)
    runs = discover_runs([JAX_LOGDIR])
    assert [r.run_id for r in runs] == [SESSION]  # as TensorBoard lists the session
    assert [p.name for p in runs[0].files] == ["vm.xplane.pb"]
    skipped = {p.name: why for p, why in runs[0].skipped}
    assert set(skipped) == {"vm.trace.json.gz", "perfetto_trace.json.gz"}
    assert "rendering of vm.xplane.pb" in skipped["vm.trace.json.gz"]
    text = "\n".join(describe(runs))
    assert "skipped vm.trace.json.gz" in text and "skipped perfetto_trace.json.gz" in text
    wh = tmp_path / "wh"
    assert ingest([JAX_LOGDIR], wh).ok
    # one copy of the data: the XSpace's rows, not three times as many
    assert _q(wh, "SELECT count(*), sum(duration_ns), min(stream), max(stream) FROM kernels") == [(n_gpu, gpu_ns, 14, 14)]
    assert _q(wh, "SELECT count(*) FROM nodes WHERE device = 'CPU:0'") == [(n_host,)]  # GPU:0: its XLA ops
    assert _q(wh, "SELECT source_files, formats FROM runs") == [(["vm.xplane.pb"], ["xspace"])]


def test_two_sessions_in_a_logdir_are_two_runs(tmp_path):
    logdir = tmp_path / "runs" / "mlp" / "plugins" / "profile"
    for s in ("2026_01_01_00_00_00", "2026_01_02_00_00_00"):
        shutil.copytree(JAX_LOGDIR / "plugins" / "profile" / SESSION, logdir / s)
    runs = discover_runs([tmp_path / "runs"])
    assert [r.run_id for r in runs] == ["mlp/2026_01_01_00_00_00", "mlp/2026_01_02_00_00_00"]
    wh = tmp_path / "wh"
    assert ingest([tmp_path / "runs"], wh).ok
    assert _q(wh, "SELECT run_id, count(*) FROM kernels GROUP BY 1 ORDER BY 1") == [
        ("mlp/2026_01_01_00_00_00", 48), ("mlp/2026_01_02_00_00_00", 48)]


def test_nested_run_folders_are_runs_with_relative_ids(tmp_path):
    runs = tmp_path / "runs"
    for model in ("alexnet", "bert", "resnet"):
        for n in (1, 2):
            (runs / model / f"run{n}").mkdir(parents=True)
            shutil.copy(scenario("node_shape_dump"), runs / model / f"run{n}" / "graph.txt")
    (runs / "bert" / "run2" / "run.json").write_text('{"model": "bert"}')
    found = discover_runs([runs])
    assert [r.run_id for r in found] == [f"{m}/run{n}" for m in ("alexnet", "bert", "resnet") for n in (1, 2)]
    wh = tmp_path / "wh"
    assert ingest([runs], wh).ok
    assert _q(wh, "SELECT run_id, count(*), count(DISTINCT source_file) FROM nodes GROUP BY 1 ORDER BY 1") == [
        (f"{m}/run{n}", DUMP_NODES, 1) for m in ("alexnet", "bert", "resnet") for n in (1, 2)]
    assert _q(wh, "SELECT run_id FROM runs WHERE model = 'bert'") == [("bert/run2",)]


def test_pb_and_pbtxt_of_one_step_count_once(tmp_path):
    from tracedb.proto import run_metadata_pb2

    run = tmp_path / "runs" / "tfjob"
    run.mkdir(parents=True)
    text = scenario("tf_runmetadata_text").read_text()
    shutil.copy(scenario("tf_runmetadata_text"), run / "step_0.pbtxt")
    msg = text_format.Parse(text, run_metadata_pb2.RunMetadata(), allow_unknown_field=True)
    (run / "step_0.pb").write_bytes(msg.SerializeToString())
    [spec] = discover_runs([tmp_path / "runs"])
    assert [p.name for p in spec.files] == ["step_0.pb"]
    assert [(p.name, why) for p, why in spec.skipped] == [("step_0.pbtxt", "the text form of step_0.pb, which is read instead")]
    wh = tmp_path / "wh"
    assert ingest([tmp_path / "runs"], wh).ok
    assert _q(wh, "SELECT count(*), count(DISTINCT step) FROM nodes") == [(TF_TEXT_NODES, 1)]


def test_symlink_loops_end_and_each_file_is_read_once(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), run / "graph.txt")
    (run / "self").symlink_to(".", target_is_directory=True)
    (run / "up").symlink_to("..", target_is_directory=True)
    (run / "again.txt").symlink_to("graph.txt")
    (tmp_path / "runs" / "top").symlink_to("..", target_is_directory=True)  # above the runs folder
    (run / "loop").symlink_to("loop")  # a link to itself
    os.mkfifo(run / "pipe")  # reading a FIFO would block forever
    [spec] = discover_runs([tmp_path / "runs"])
    assert spec.run_id == "r1" and [p.name for p in spec.files] == ["again.txt"]
    assert {p.name: why.split(":")[0] for p, why in spec.skipped} == {
        "graph.txt": "same file as again.txt", "self": "symlink loop", "up": "symlink loop",
        "loop": "broken symlink", "pipe": "not a regular file"}
    wh = tmp_path / "wh"
    summary = ingest([tmp_path / "runs"], wh)
    assert summary.ok
    assert _q(wh, "SELECT count(*) FROM nodes") == [(DUMP_NODES,)]
    # --run-id on the folder: one run of everything below it, still once each
    [spec] = discover_runs([run], run_id="x")
    assert len(spec.files) == 1


def _unlistable(monkeypatch, folder: Path) -> None:
    """Make `folder` unreadable: chmod 000, and for root (whom modes do not stop) the
    same refusal from os.scandir that a non-root user gets."""
    folder.chmod(0)
    if os.geteuid() == 0:
        real = os.scandir

        def scandir(path="."):
            if isinstance(path, (str, os.PathLike)) and Path(path) == folder:
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)


def test_unreadable_subfolder_is_a_named_error(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "r1"
    (run / "secret").mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), run / "graph.txt")
    shutil.copy(scenario("node_shape_dump"), run / "secret" / "graph.txt")
    shutil.copy(scenario("node_name_list"), tmp_path / "runs" / "names.txt")
    _unlistable(monkeypatch, run / "secret")
    try:
        summary = ingest([tmp_path / "runs"], tmp_path / "wh")
    finally:
        (run / "secret").chmod(0o755)
    assert not summary.ok
    [(where, err)] = summary.errors
    assert where.endswith("r1/secret") and err == "cannot read folder: Permission denied"
    # r1 is incomplete, so it does not land (a run lands whole); the other run does, and
    # the files view records the folder's error
    assert _q(tmp_path / "wh", "SELECT run_id, count(*) FROM nodes GROUP BY 1 ORDER BY 1") == [("names", NAMES_NODES)]
    assert _q(tmp_path / "wh", "SELECT path, status FROM files WHERE run_id = 'r1' ORDER BY path") == [
        ("graph.txt", "ok"), ("secret", "error")]
    # --partial lands what is readable
    _unlistable(monkeypatch, run / "secret")
    try:
        summary = ingest([tmp_path / "runs"], tmp_path / "wh", partial=True)
    finally:
        (run / "secret").chmod(0o755)
    assert _q(tmp_path / "wh", "SELECT run_id, count(*) FROM nodes GROUP BY 1 ORDER BY 1") == [
        ("names", NAMES_NODES), ("r1", DUMP_NODES)]


def test_unreadable_run_folder_is_a_named_error_and_the_others_land(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        (runs / name).mkdir(parents=True)
        shutil.copy(scenario("node_shape_dump"), runs / name / "graph.txt")
    _unlistable(monkeypatch, runs / "a")
    try:
        summary = ingest([runs], tmp_path / "wh")
    finally:
        (runs / "a").chmod(0o755)
    assert [(r.run_id, [f.error for f in r.files]) for r in summary.runs] == [
        ("a", ["cannot read folder: Permission denied"]), ("b", [None])]
    assert _q(tmp_path / "wh", "SELECT run_id, count(*) FROM nodes GROUP BY 1") == [("b", DUMP_NODES)]
    assert _q(tmp_path / "wh", "SELECT run_id, path, status FROM files WHERE run_id = 'a'") == [("a", "a", "error")]


def test_unreadable_file_in_a_run_is_a_named_error(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), run / "a.txt")
    shutil.copy(scenario("node_shape_dump"), run / "b.txt")
    (run / "b.txt").chmod(0)
    if os.geteuid() == 0:  # root reads any mode: refuse as the OS would for another user
        real = builtins.open

        def fake_open(file, *a, **k):
            if isinstance(file, (str, os.PathLike)) and Path(file) == run / "b.txt":
                raise PermissionError(13, "Permission denied", str(file))
            return real(file, *a, **k)

        monkeypatch.setattr(builtins, "open", fake_open)
    summary = ingest([tmp_path / "runs"], tmp_path / "wh")
    (run / "b.txt").chmod(0o644)
    [(where, err)] = summary.errors
    assert where.endswith("r1/b.txt") and "Permission denied" in err


def test_names_that_are_not_utf8_are_ingested_escaped(tmp_path):
    runs = tmp_path / "runs"
    bad_dir = os.fsdecode(b"caf\xe9_run")
    (runs / bad_dir).mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), runs / bad_dir / os.fsdecode(b"graph\xff.txt"))
    (runs / "good").mkdir()
    shutil.copy(scenario("node_name_list"), runs / "good" / "names.txt")
    wh = tmp_path / "wh"
    summary = ingest([runs], wh)
    assert summary.ok, summary.errors
    assert sorted(r.run_id for r in summary.runs) == ["caf\\xe9_run", "good"]
    assert _q(wh, "SELECT run_id, source_file, count(*) FROM nodes GROUP BY ALL ORDER BY 1") == [
        ("caf\\xe9_run", "graph\\xff.txt", DUMP_NODES), ("good", "names.txt", NAMES_NODES)]


def test_empty_folder_says_no_trace_files(tmp_path):
    (tmp_path / "runs" / "a" / "b").mkdir(parents=True)
    with pytest.raises(TracedbError, match="no trace files found in"):
        discover_runs([tmp_path / "runs"])
    with pytest.raises(TracedbError, match="no trace files found in"):
        discover_runs([tmp_path / "runs"], run_id="x")
    with pytest.raises(TracedbError, match="--run-id: a run id cannot be empty or blank"):
        discover_runs([tmp_path / "runs"], run_id="")
