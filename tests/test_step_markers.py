"""Step markers (issue 24 items 2 and 3): XSpace steps from `step_num` host events (JAX's
`StepTraceAnnotation`), and one host step time, the marker's span, in `step_times`,
`fleet_trend` and the rollup a migration computes anew. Oracles: the raw XSpace read with
protobuf, the raw Kineto JSON read with `json` (tests/rawtrace.py)."""

from __future__ import annotations

import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import rawtrace
from rawtrace import rows

DATA = Path(__file__).parent / "data"
JAX_NIGHT = DATA / "jax_dev_fleet" / "night1"


def _xplane(folder: Path) -> Path:
    return next(folder.rglob("*.xplane.pb"))


def _raw_xspace_steps(path: Path):
    """(step -> (start, end)), (correlation id -> host launch start), [(kernel start,
    correlation id)] straight from the XSpace protobuf."""
    from tracedb.proto import xplane_pb2

    xs = xplane_pb2.XSpace()
    xs.ParseFromString(path.read_bytes())
    steps, launches, kernels = {}, {}, []
    for plane in xs.planes:
        names = {k: m.name for k, m in plane.stat_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                st = {names[s.metadata_id]: s.int64_value or s.uint64_value for s in ev.stats
                      if s.WhichOneof("value") in ("int64_value", "uint64_value")}
                start = line.timestamp_ns + ev.offset_ps // 1000
                if plane.name == "/host:CPU" and "step_num" in st:
                    steps[st["step_num"]] = (start, start + ev.duration_ps // 1000)
                elif plane.name == "/host:CPU" and "correlation_id" in st:
                    launches[st["correlation_id"]] = start
                elif plane.name.startswith("/device:GPU:"):
                    kernels.append((start, st.get("correlation_id"), plane.event_metadata[ev.metadata_id].name,
                                    ev.duration_ps // 1000))
    return steps, launches, kernels


def _step_at(steps: dict, t: int):
    return next((n for n, (s, e) in steps.items() if s <= t < e), None)


@pytest.fixture(scope="module")
def jax_wh(tmp_path_factory) -> Path:
    from tracedb.ingest import ingest

    wh = tmp_path_factory.mktemp("jaxsteps") / "wh"
    assert ingest([_xplane(JAX_NIGHT)], wh, run_id="night1").ok
    return wh


def test_xspace_steps_are_the_step_annotations(jax_wh):
    from tracedb import catalog

    steps, launches, kernels = _raw_xspace_steps(_xplane(JAX_NIGHT))
    assert sorted(steps) == [0, 1, 2, 3]  # StepTraceAnnotation("train", step_num=i), 4 steps
    con = catalog.connect(jax_wh)
    got = {r[0]: (r[1], r[2], r[3]) for r in con.execute(
        "SELECT step, start_ns, duration_ns, name FROM steps WHERE run_id = 'night1'").fetchall()}
    assert {n: (s, e - s, "train") for n, (s, e) in steps.items()} == got
    # a kernel's step is its launch's (the host event of the same correlation id)
    expect = Counter(_step_at(steps, launches[c]) if c in launches else None for _, c, _, _ in kernels)
    have = Counter(dict(con.execute("SELECT step, count(*) FROM kernels WHERE run_id = 'night1' GROUP BY 1").fetchall()))
    assert have == expect and have[None] == 0 and len(have) == 4
    # device work per step: the step's kernels' first start to last end
    work = defaultdict(list)
    for start, c, _, _ in kernels:
        if c in launches:
            work[_step_at(steps, launches[c])].append(start)
    dev = dict(con.execute("SELECT step, device_start_ns FROM steps WHERE run_id = 'night1'").fetchall())
    assert dev == {n: min(v) for n, v in work.items()}
    con.close()


def test_xspace_step_times_per_step(jax_wh):
    steps, launches, kernels = _raw_xspace_steps(_xplane(JAX_NIGHT))
    per_step = Counter(_step_at(steps, launches[c]) for _, c, name, _ in kernels
                       if c in launches and not name.startswith("Memset"))
    got = {r["step"]: r for r in rows("step_times", jax_wh, run_id="night1")}
    assert {n: got[n]["host_step_ns"] for n in steps} == {n: e - s for n, (s, e) in steps.items()}
    assert {n: got[n]["host_start_ns"] for n in steps} == {n: s for n, (s, _) in steps.items()}
    assert {n: got[n]["kernels"] for n in steps} == per_step  # kernels a step, memsets apart


KINETO_RUNS = {"h200": DATA / "kineto_h200_fp32", "rocm": DATA / "hta_rocm_mi250", "cnn": DATA / "fleet_dev" / "day1",
               "nccl": DATA / "hta_nccl_two_ranks", "triton": DATA / "hta_triton"}


@pytest.fixture(scope="module")
def kineto_wh(tmp_path_factory) -> Path:
    from tracedb.ingest import ingest

    wh = tmp_path_factory.mktemp("marks") / "wh"
    for run, folder in KINETO_RUNS.items():
        assert ingest([folder], wh, run_id=run).ok
    return wh


def _raw_marks(folder: Path, with_ops: bool = True) -> dict:
    """(rank, step) -> ProfilerStep#N span from each raw trace of a run folder; with
    `with_ops`, only the steps that hold a host op or a GPU activity (step_times has a
    row for those: a marked step with nothing in it, such as the stub a profiler leaves
    when it stops, has none)."""
    out = {}
    for path in sorted(folder.glob("*.json.gz")):
        doc = rawtrace.load_kineto_json(path)
        dist = doc.get("distributedInfo") or {}
        rank = int(dist["rank"]) if "rank" in dist else None
        trace = rawtrace.kineto(doc)
        busy = {a.step for a in trace.nodes + trace.kernels}
        for n, (s, e) in trace.steps.items():
            if n in busy or not with_ops:
                out[(rank, n)] = e - s
    return out


@pytest.mark.parametrize("run", sorted(KINETO_RUNS))
def test_host_step_is_the_marker_span(kineto_wh, run):
    """step_times.host_step_ns equals the ProfilerStep#N span (steps.duration_ns) wherever
    the trace marks the step; fleet_trend's mean host step averages the same values."""
    marks = _raw_marks(KINETO_RUNS[run])
    got = {(r["rank"], r["step"]): r["host_step_ns"] for r in rows("step_times", kineto_wh, run_id=run)
           if r["step"] is not None}
    assert marks and {k: got[k] for k in marks} == marks
    assert set(got) <= set(_raw_marks(KINETO_RUNS[run], with_ops=False))
    trend = {r["run_id"]: r for r in rows("fleet_trend", kineto_wh)}[run]
    mine = [got[k] for k in got if got[k] is not None]
    assert trend["mean_host_step_ns"] == pytest.approx(sum(mine) / len(mine), abs=0.05)


def test_migration_computes_step_times_anew(tmp_path):
    """The frozen schema-6 lake (made by the code before schema 7): after `migrate`, the
    Kineto runs' host step is the marker span, one rollup row per step as before."""
    from tracedb import catalog
    from tracedb.migrate import migrate_warehouse

    wh = tmp_path / "wh"
    shutil.copytree(DATA / "frozen_warehouse_schema6", wh)
    applied = migrate_warehouse(wh)
    assert any("marked_step_times" in str(m) for m in applied)
    marks = _raw_marks(DATA / "kineto_h200_fp32")
    got = rows("step_times", wh, run_id="kineto")
    assert {(r["rank"], r["step"]): r["host_step_ns"] for r in got if r["step"] is not None} == marks
    assert Counter(r["step"] for r in got) == Counter({1: 1, 2: 1, 3: 1, None: 1})
    nccl = _raw_marks(DATA / "hta_nccl_two_ranks")
    got = {(r["rank"], r["step"]): r["host_step_ns"] for r in rows("step_times", wh, run_id="nccl2")
           if r["step"] is not None}
    assert {k: got[k] for k in nccl} == nccl
    con = catalog.connect(wh)
    # the swap left one version of each run's rollup: no run's rows twice
    assert con.execute("SELECT count(*), count(DISTINCT (run_id, rank, step)) FROM rollup_step_times").fetchone()[0] == \
        con.execute("SELECT count(DISTINCT (run_id, rank, step)) FROM rollup_step_times").fetchone()[0]
    con.close()


def test_jax_fleet_report_compares_steps(tmp_path):
    """The JAX nightly fleet (issue 24 items 1-2): each night folder lands as one run with
    its run.json labels, and the report compares per-step samples: GPU kernel time per
    step of each night equals the raw XSpace's per-step sums (kernels by their launch's
    step; memsets apart), four samples a run."""
    import json

    from tracedb import Warehouse

    fleet = DATA / "jax_dev_fleet"
    wh = Warehouse(tmp_path / "wh")
    assert wh.ingest(fleet).ok
    assert {r["run_id"]: r["model"] for r in wh.sql("SELECT run_id, model FROM runs").to_pylist()} == {
        n: "jaxcnn2" for n in ("night1", "night2", "night3", "wide72")}
    out = tmp_path / "report.json"
    wh_root = tmp_path / "wh"
    from typer.testing import CliRunner

    from tracedb.cli import app

    res = CliRunner().invoke(app, ["report", "--warehouse", str(wh_root), "--label", "model=jaxcnn2",
                                   "--candidate", "wide72", "--history", "3", "--format", "json", "--output", str(out)])
    assert res.exit_code == 1, res.output  # wide72 does more GPU work a step
    doc = json.loads(out.read_text())
    metric = next(m for m in doc["metrics"] if m["key"] == "GPU:0/gpu_kernel_time")
    per_run = {**metric["baseline"]["per_run"], **metric["candidate"]["per_run"]}
    expect = {}
    for night in ("night1", "night2", "night3", "wide72"):
        labels = json.loads((fleet / night / "run.json").read_text())
        assert labels["model"] == "jaxcnn2"
        steps, launches, kernels = _raw_xspace_steps(_xplane(fleet / night))
        sums = Counter()
        for _, c, name, dur in kernels:
            if c in launches and not name.startswith("Memset"):
                sums[_step_at(steps, launches[c])] += dur
        expect[night] = [float(sums[n]) for n in sorted(sums)]
    assert per_run == expect and all(len(v) == 4 for v in per_run.values())
