"""How an ingest finds runs and files, on real layouts (issues 23 #3, 24 #1, #4, #8):

- a JAX nightly fleet (`<night>/run.json` beside `<night>/plugins/profile/<session>/`)
  lands as one run per night folder, with its labels;
- files no reader claims (a README, a log, a config, a binary, an empty file) are skipped
  with a warning, recorded in `files` as `skipped`, listed by `--dry-run`, and never keep
  their run from landing or make the exit code non-zero; a file a reader claims and fails
  on still keeps its run at its previous version;
- two Kineto traces of different programs in one folder, one naming rank 0 in
  `distributedInfo` and one naming none, never share a rank;
- the per-run seconds are how long reading the run took.

Oracles: run.json read with `json`, the XSpace's GPU events counted with the generated
protobuf classes, the Kineto steps with `json` (tests/rawtrace.py).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rawtrace
from conftest import DATA
from tracedb import catalog
from tracedb.cli import app
from tracedb.discover import describe, discover_runs, drop_unclaimed, fallback_ranks
from tracedb.errors import TracedbError
from tracedb.ingest import ingest
from tracedb.proto import xplane_pb2

FLEET = DATA / "jax_dev_fleet"
NIGHTS = ["night1", "night2", "night3", "wide72"]
runner = CliRunner()


def _xplane(night: Path) -> tuple[str, int, int]:
    """(path below the night folder, GPU stream events, their total ns) of its one XSpace."""
    [pb] = night.glob("plugins/profile/*/*.xplane.pb")
    space = xplane_pb2.XSpace.FromString(pb.read_bytes())
    events = [e for p in space.planes if p.name.startswith("/device:GPU:")
              for line in p.lines if line.name.startswith("Stream #") for e in line.events]
    assert all(e.duration_ps % 1000 == 0 for e in events)
    return pb.relative_to(night).as_posix(), len(events), sum(e.duration_ps for e in events) // 1000


def _q(wh: Path, sql: str) -> list[tuple]:
    con = catalog.connect(wh)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# ---- JAX nightly folders (issue 24 #1) ----------------------------------------------

def test_jax_fleet_lands_one_run_per_night_folder_with_its_labels(tmp_path):
    labels = {n: json.loads((FLEET / n / "run.json").read_text()) for n in NIGHTS}
    raw = {n: _xplane(FLEET / n) for n in NIGHTS}
    assert [r.run_id for r in discover_runs([FLEET])] == NIGHTS
    wh = tmp_path / "wh"
    summary = ingest([FLEET], wh)
    assert summary.ok, summary.errors
    assert [r.run_id for r in summary.runs] == NIGHTS
    got = _q(wh, "SELECT run_id, model, \"commit\", hardware, strftime(started_at AT TIME ZONE 'UTC', "
                 "'%Y-%m-%dT%H:%M:%SZ'), source_files FROM runs ORDER BY run_id")
    assert got == [(n, labels[n]["model"], labels[n]["commit"], labels[n]["hardware"], labels[n]["started_at"],
                    [raw[n][0]]) for n in NIGHTS]
    assert _q(wh, "SELECT run_id, count(*), sum(duration_ns) FROM kernels GROUP BY 1 ORDER BY 1") == [
        (n, raw[n][1], raw[n][2]) for n in NIGHTS]
    # the --label / --history selection finds them by their labels
    assert _q(wh, "SELECT run_id FROM runs WHERE model = 'jaxcnn2' ORDER BY started_at") == [(n,) for n in NIGHTS]


def test_a_night_folder_given_as_path_is_that_night(tmp_path):
    night = FLEET / "night2"
    [spec] = discover_runs([night])
    assert spec.run_id == "night2" and spec.labels_file == night / "run.json"
    wh = tmp_path / "wh"
    assert ingest([night], wh).ok
    assert _q(wh, "SELECT run_id, \"commit\" FROM runs") == [("night2", json.loads((night / "run.json").read_text())["commit"])]


def test_several_sessions_under_a_run_folder_are_one_run_and_a_bare_logdir_one_run_per_session(tmp_path):
    """The rule: a `run.json` at or above a log dir makes its folder one run of every
    session below it; a log dir with none around it gives one run per session."""
    runs = tmp_path / "runs"
    shutil.copytree(FLEET / "night1", runs / "night1")
    [second] = (FLEET / "night2" / "plugins" / "profile").iterdir()
    shutil.copytree(second, runs / "night1" / "plugins" / "profile" / second.name)  # a 2nd profile that night
    for night in ("night3", "wide72"):  # log dirs without a run.json around them
        shutil.copytree(FLEET / night / "plugins", runs / "bare" / night / "plugins")
    sessions = {n: next((FLEET / n / "plugins" / "profile").iterdir()).name for n in ("night3", "wide72")}
    found = discover_runs([runs])
    assert [r.run_id for r in found] == [f"bare/night3/{sessions['night3']}", f"bare/wide72/{sessions['wide72']}",
                                         "night1"]
    assert len(found[2].files) == 2
    wh = tmp_path / "wh"
    assert ingest([runs], wh).ok
    n1, n2 = _xplane(FLEET / "night1"), _xplane(FLEET / "night2")
    assert _q(wh, "SELECT count(*), sum(duration_ns), count(DISTINCT source_file) FROM kernels WHERE run_id = 'night1'") == [
        (n1[1] + n2[1], n1[2] + n2[2], 2)]
    assert _q(wh, "SELECT run_id, \"commit\" FROM runs ORDER BY 1") == [
        (f"bare/night3/{sessions['night3']}", None), (f"bare/wide72/{sessions['wide72']}", None),
        ("night1", json.loads((FLEET / "night1" / "run.json").read_text())["commit"])]


def test_only_sessions_join_the_run_folder_around_them(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(FLEET / "night1", runs / "night1")
    shutil.copytree(FLEET / "night2", runs / "night1" / "rerun")  # its own run.json: its own run
    shutil.copytree(DATA / "fleet_dev" / "day1", runs / "night1" / "torch")  # a folder of traces: its own run
    (runs / "night1" / "torch" / "run.json").unlink()
    found = discover_runs([runs])
    assert [(r.run_id, [p.name for p in r.files]) for r in found] == [
        ("night1", ["vm.xplane.pb"]), ("night1/rerun", ["vm.xplane.pb"]), ("night1/torch", ["trace.json.gz"])]
    assert [r.labels_file for r in found] == [runs / "night1" / "run.json", runs / "night1" / "rerun" / "run.json", None]


# ---- files no reader claims (issue 23 #3) ----------------------------------------------

STRAYS = {
    "README.md": b"# night 1\n\nThe usual nightly run; see the dashboard.\n",
    "train.log": b"step 1 loss 2.31\nstep 2 loss 2.07\nstep 3 loss 1.88\n",
    "config.json": b'{"lr": 0.001, "batch": 64, "model": {"channels": 64}}\n',
    "ckpt.bin": bytes((i * 7919 + 13) % 256 for i in range(5000)),
    "stderr.txt": b"",
    "host0.log": b"2026-11-27 03:00:01 INFO starting\n",
}


def _night_with_strays(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(FLEET / "night1", runs / "night1")
    for name, data in STRAYS.items():
        (runs / "night1" / name).write_bytes(data)
    (runs / "docs").mkdir()
    (runs / "docs" / "notes.md").write_text("how we run the nightly profiles\n")
    return runs


def test_stray_files_are_skipped_and_the_run_lands(tmp_path):
    runs = _night_with_strays(tmp_path)
    pb, n_kernels, kernel_ns = _xplane(FLEET / "night1")
    wh = tmp_path / "wh"
    summary = ingest([runs], wh, jobs=2)
    assert summary.ok, summary.errors
    night = {r.run_id: r for r in summary.runs}["night1"]
    assert night.replaced and [f.rel for f in night.files] == [pb]
    assert sorted(f.rel for f in night.skipped) == sorted(STRAYS)
    assert _q(wh, "SELECT run_id, count(*), sum(duration_ns) FROM kernels GROUP BY 1") == [("night1", n_kernels, kernel_ns)]
    assert _q(wh, "SELECT run_id, status FROM runs") == [("night1", "complete")]
    files = _q(wh, "SELECT run_id, path, status, format, rows_kernels, error, size_bytes FROM files ORDER BY 1, 2")
    expected = [("docs", "notes.md", "skipped", None, None, "not a trace: no reader claims it", 32)] + sorted(
        [("night1", name, "skipped", None, None,
          "not a trace: " + ("empty file" if not data else "no reader claims it"), len(data))
         for name, data in STRAYS.items()] + [("night1", pb, "ok", "xspace", n_kernels, None, (FLEET / "night1" / pb).stat().st_size)])
    assert files == expected


def test_stray_files_cli_exit_0_with_warnings_and_dry_run_lists_them(tmp_path):
    runs = _night_with_strays(tmp_path)
    r = runner.invoke(app, ["ingest", str(runs), "--dry-run"])
    assert r.exit_code == 0, r.output
    for name in STRAYS:
        assert f"skipped {name}: not a trace" in r.output, r.output
    assert "docs: 0 file(s)" in r.output and "no trace files, not a run" in r.output
    assert re.search(r"night1: 1 file\(s\)", r.output)
    r = runner.invoke(app, ["ingest", str(runs), "-w", str(tmp_path / "wh"), "--jobs", "1"])
    assert r.exit_code == 0, r.output
    for name in STRAYS:
        assert re.search(rf"warning: .*night1/{re.escape(name)}: skipped: not a trace", r.output), r.output
    assert re.search(r"night1: 1/1 files, 6 skipped, \d+ nodes, \d+ kernels", r.output), r.output
    assert "docs: no trace files, 1 skipped: not a run" in r.output
    assert "error" not in r.output.replace("0 error(s)", "")


def test_dry_run_library_call_moves_unclaimed_files_to_skipped(tmp_path):
    runs = _night_with_strays(tmp_path)
    found = {r.run_id: r for r in drop_unclaimed(discover_runs([runs]))}
    assert [p.name for p in found["night1"].files] == ["vm.xplane.pb"]
    assert sorted(p.relative_to(runs / "night1").as_posix() for p, why in found["night1"].skipped
                  if why.startswith("not a trace")) == sorted(STRAYS)
    assert any("skipped README.md: not a trace" in line for line in describe(list(found.values())))


def test_a_claimed_file_that_fails_still_keeps_the_run_at_its_previous_version(tmp_path):
    runs = _night_with_strays(tmp_path)
    wh = tmp_path / "wh"
    assert ingest([runs], wh).ok
    before = _q(wh, "SELECT count(*), sum(duration_ns) FROM kernels")
    ingested_at = _q(wh, "SELECT ingested_at FROM runs WHERE run_id = 'night1'")
    # half a Kineto trace: its reader claims it (the head is Kineto's) and fails on the rest
    text = gzip.decompress((DATA / "fleet_dev" / "day1" / "trace.json.gz").read_bytes())
    (runs / "night1" / "torch.json").write_bytes(text[:len(text) // 2])
    summary = ingest([runs], wh)
    [(where, err)] = summary.errors
    assert where.endswith("night1/torch.json") and err
    night = {r.run_id: r for r in summary.runs}["night1"]
    assert not night.replaced and len(night.skipped) == len(STRAYS)
    assert _q(wh, "SELECT count(*), sum(duration_ns) FROM kernels") == before
    assert _q(wh, "SELECT ingested_at FROM runs WHERE run_id = 'night1'") == ingested_at
    assert _q(wh, "SELECT status, format FROM files WHERE path = 'torch.json'") == [("error", "kineto")]
    r = runner.invoke(app, ["ingest", str(runs), "-w", str(wh), "--jobs", "1"])
    assert r.exit_code == 1 and "night1: not replaced" in r.output


def test_a_run_folder_with_labels_and_only_stray_files_is_an_error(tmp_path):
    runs = tmp_path / "runs"
    (runs / "night9").mkdir(parents=True)
    shutil.copy(FLEET / "night1" / "run.json", runs / "night9" / "run.json")
    (runs / "night9" / "README.md").write_bytes(STRAYS["README.md"])
    shutil.copytree(FLEET / "night1", runs / "night1")
    summary = ingest([runs], tmp_path / "wh")
    [(where, err)] = summary.errors
    assert where.endswith("night9") and err == "no trace files in this run folder (1 file(s) skipped: no reader claims them)"
    assert _q(tmp_path / "wh", "SELECT run_id FROM runs") == [("night1",)]


def test_nothing_but_stray_files_is_no_ingest(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_bytes(STRAYS["README.md"])
    (tmp_path / "docs" / "train.log").write_bytes(STRAYS["train.log"])
    with pytest.raises(TracedbError, match=r"no trace files found in .*docs: no reader claims any of its 2 file\(s\)"):
        ingest([tmp_path / "docs"], tmp_path / "wh")
    assert not (tmp_path / "wh").exists()  # no warehouse made for nothing
    # a file named as PATH is said to be a trace: no reader claiming it is its error
    summary = ingest([tmp_path / "docs" / "README.md"], tmp_path / "wh")
    [(where, err)] = summary.errors
    assert where.endswith("README.md") and "unknown format" in err


# ---- ranks (issue 24 #4) --------------------------------------------------------------

RANKED = DATA / "hta_nccl_allreduce" / "rank-0.json.gz"  # distributedInfo rank 0, ProfilerStep#4-6
UNRANKED = DATA / "fleet_dev" / "day1" / "trace.json.gz"  # no distributedInfo, ProfilerStep#1-5


@pytest.mark.parametrize("names,jobs", [
    (("cnn.json.gz", "nccl.json.gz"), 1),  # the trace without a rank first: by file order it was rank 0
    (("cnn.json.gz", "nccl.json.gz"), 2),
    (("z_cnn.json.gz", "nccl.json.gz"), 1),  # and second
])
def test_traces_of_different_programs_never_share_a_rank(tmp_path, names, jobs):
    ranked, unranked = rawtrace.load_kineto_json(RANKED), rawtrace.load_kineto_json(UNRANKED)
    assert ranked["distributedInfo"]["rank"] == 0 and "distributedInfo" not in unranked
    run = tmp_path / "runs" / "mixed"
    run.mkdir(parents=True)
    shutil.copy(UNRANKED, run / names[0])
    shutil.copy(RANKED, run / names[1])
    wh = tmp_path / "wh"
    summary = ingest([tmp_path / "runs"], wh, jobs=jobs)
    assert summary.ok, summary.errors
    # each trace's rows carry its own rank: the one it names, else one no other trace names
    assert _q(wh, "SELECT source_file, min(rank), max(rank), count(*) FROM kernels GROUP BY 1 ORDER BY 1") == sorted([
        (names[0], 1, 1, len(rawtrace.kineto(unranked).kernels)), (names[1], 0, 0, len(rawtrace.kineto(ranked).kernels))])
    steps = {(1, n): (s, e - s) for n, (s, e) in rawtrace.kineto(unranked).steps.items()}
    steps |= {(0, n): (s, e - s) for n, (s, e) in rawtrace.kineto(ranked).steps.items()}
    assert {(4, 0), (4, 1)} <= set((n, r) for r, n in steps)  # both programs have a step 4
    assert _q(wh, "SELECT rank, step, start_ns, duration_ns FROM steps ORDER BY 1, 2") == [
        (r, n, s, d) for (r, n), (s, d) in sorted(steps.items())]
    # their steps do not merge: one step_times row per (rank, step), none longer than the marker
    rows = _q(wh, "SELECT rank, step FROM rollup_step_times WHERE step IS NOT NULL ORDER BY 1, 2")
    assert rows == sorted(steps)
    assert {json.loads(m).get("rank") for (m,) in _q(wh, "SELECT metadata FROM files")} == {0, 1}
    # nothing of the first read (with the clashing rank) is left in the lake
    assert _q(wh, "SELECT count(*) FROM kernels WHERE rank = 0 AND source_file = " + repr(names[0])) == [(0,)]
    warnings = {f.rel: f.warning for f in summary.runs[0].files}
    assert warnings[names[1]] is None and "rank 1 by file order" in warnings[names[0]]
    assert "another trace of the run names (0)" in warnings[names[0]]


def test_fallback_ranks_skip_the_ranks_traces_name():
    paths = [Path("a.json"), Path("b.json")]
    assert [r for r, _ in fallback_ranks(paths)] == [0, 1]
    assert [r for r, _ in fallback_ranks(paths, {0, 2})] == [1, 3]
    assert [r for r, _ in fallback_ranks([Path("rank3.json"), Path("rank5.json")], {1})] == [3, 5]  # names, no clash
    assert [r for r, _ in fallback_ranks([Path("rank1.json"), Path("rank5.json")], {1})] == [0, 2]  # a name clashes


# ---- per-run seconds (issue 24 #8) ---------------------------------------------------

def test_per_run_seconds_are_the_time_reading_the_run_took(tmp_path):
    runs = tmp_path / "runs"
    for i in range(6):
        (runs / f"r{i}").mkdir(parents=True)
        shutil.copy(UNRANKED, runs / f"r{i}" / "trace.json.gz")
    wh = tmp_path / "wh"
    r = runner.invoke(app, ["ingest", str(runs), "-w", str(wh), "--jobs", "2"])
    assert r.exit_code == 0, r.output
    printed = dict(re.findall(r"^(r\d): 1/1 files, .*\((\d+\.\d\d)s\)$", r.output, re.M))
    recorded = dict(_q(wh, "SELECT run_id, sum(seconds) FROM files GROUP BY 1"))
    assert sorted(printed) == [f"r{i}" for i in range(6)]
    for run, secs in printed.items():
        assert abs(float(secs) - recorded[run]) <= 0.0051 and recorded[run] > 0.005, (run, secs, recorded[run])
