"""Run-scoped views (issue 12: one-run cost flat in the number of runs).

A canned query whose header says `-- scope: run_id` runs, when run_id is given, against
TEMP views over that run's files alone (`tracedb.snapshot.scope_to_runs`). That is only
right if the query reads nothing of other runs: every scoped query must return exactly
what it returns against the snapshot's whole views, for every run of two warehouses (the
seed warehouse: seven runs of five formats; fleet_dev: six runs of one program, where a
query that mixed in other runs' rows would show it; two NCCL jobs, for the collective
queries; two PyTorch execution-trace runs with their Kineto traces, for tensor_flow). Speed is in bench/bench_queries.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from tracedb import catalog
from tracedb import query as q
from tracedb import sqllib
from tracedb.errors import TracedbError
from tracedb.ingest import ingest

from conftest import scenario

SCOPED = [cq.name for cq in sqllib.list_queries() if cq.scope]


def test_every_query_with_a_run_parameter_is_scoped():
    """The library's queries all read only the runs they name; a new one that does not
    must say so here (and leave `-- scope:` out)."""
    run_params = set(q.RUN_PARAMS)
    with_runs = {cq.name for cq in sqllib.list_queries() if run_params & {p.name for p in cq.params}}
    assert set(SCOPED) == with_runs and len(SCOPED) == 35
    assert sqllib.load("compare_runs").scope == ("baseline", "candidate")
    assert sqllib.load("graph_diff").scope == ("run_a", "run_b")


def _values_per_run(cq, runs: list[str]):
    if cq.scope == ("run_id",):
        return [{"run_id": r} for r in runs]
    a, b = cq.scope  # two runs compared: each with its neighbour, and a run with itself
    return [{a: x, b: y} for x, y in zip(runs, runs[1:] + runs[:1])] + [{a: runs[0], b: runs[0]}]


@pytest.fixture(scope="module")
def nccl_jobs(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("nccl") / "wh"
    for name in ("hta_nccl_allreduce", "hta_nccl_two_ranks"):
        assert ingest([Path(__file__).parent / "data" / name], wh, run_id=name).ok
    return wh


@pytest.fixture(scope="module")
def execution_traces(tmp_path_factory) -> Path:
    """Two PyTorch execution-trace runs, each its ET beside its Kineto trace (tensor_flow
    has rows only here)."""
    wh = tmp_path_factory.mktemp("chakra") / "wh"
    for run_id, folder in (("mlp", "chakra_mlp_h100"), ("linear", "chakra_linear_param")):
        assert ingest([Path(__file__).parent / "data" / folder], wh, run_id=run_id).ok
    return wh


@pytest.mark.parametrize("name", SCOPED)
def test_scoped_rows_equal_the_whole_views(name, seed_warehouse, fleet_warehouse, nccl_jobs, execution_traces):
    cq = sqllib.load(name)
    whole = dataclasses.replace(cq, scope=())
    nonempty = 0
    for wh in (seed_warehouse, fleet_warehouse, nccl_jobs, execution_traces):
        con = catalog.connect(wh)
        runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        for given in _values_per_run(cq, runs):
            values = sqllib.bind(cq, given)
            want = q.execute(con, whole, values)
            got = q.execute(con, cq, values)
            assert got.schema == want.schema and got.equals(want), (name, wh, given)
            nonempty += got.num_rows > 0
    assert nonempty >= 1  # real rows were compared (megengine_*, nccl_bandwidth: one run has them; tensor_flow: the execution traces)


@pytest.fixture(scope="module")
def two_runs_once(tmp_path_factory) -> Path:
    """The Kineto trace ingested twice, as runs a and b (one ingest each), once a module."""
    wh = tmp_path_factory.mktemp("two_runs") / "wh"
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="a").ok
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="b").ok
    return wh


@pytest.fixture
def two_runs(two_runs_once, tmp_path) -> Path:
    """A test's own copy of `two_runs_once` (the tests break it on purpose), its snapshot
    rebuilt for the new folder as for any moved warehouse: a fifth of two ingests' CPU."""
    wh = tmp_path / "wh"
    shutil.copytree(two_runs_once, wh)
    catalog.connect(wh).close()
    return wh


def remove_kernels_file_of(wh: Path, run: str) -> None:
    """Delete the kernels file that holds `run` alone (each run here is its own ingest)."""
    from tracedb.lake import Lake

    [path] = [r["path"] for r in Lake(wh).add_actions("kernels").to_pylist() if r["run_id"] == r["run_hi"] == run]
    (wh / path).unlink()


def test_a_scoped_query_binds_only_its_runs_files(two_runs):
    """Run b's kernels file gone behind the snapshot's back: the whole `kernels` view can
    no longer be bound, yet run a's scoped query reads only run a's files and answers
    (top_kernels: a query that reads raw kernel rows; kernel_summary reads its rollup)."""
    con = catalog.connect(two_runs)
    want = q.execute(con, sqllib.load("top_kernels"), sqllib.bind(sqllib.load("top_kernels"), {"run_id": "a"}))
    assert want.num_rows > 0
    con.close()
    remove_kernels_file_of(two_runs, "b")
    cq = sqllib.load("top_kernels")
    got = q.run_query(cq, {"run_id": "a"}, two_runs)
    assert got.equals(want)
    with pytest.raises(TracedbError, match="top_kernels: IOException"):
        q.run_query(dataclasses.replace(cq, scope=()), {"run_id": "a"}, two_runs)


def test_scoped_views_are_dropped_after_the_query(two_runs):
    con = catalog.connect(two_runs)
    cq = sqllib.load("kernel_summary")
    one = q.execute(con, cq, sqllib.bind(cq, {"run_id": "a"}))
    assert set(one.column("run_id").to_pylist()) == {"a"}
    assert con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary AND NOT internal").fetchall() == [(0,)]
    both = q.execute(con, cq, sqllib.bind(cq, {}))
    assert set(both.column("run_id").to_pylist()) == {"a", "b"}


def test_a_snapshot_without_its_live_files_runs_unscoped(two_runs):
    """A snapshot written before run scoping (no tracedb_live_files) gives the same rows
    through the whole views."""
    con = catalog.connect(two_runs, read_only=False)  # a private copy of the snapshot
    cq = sqllib.load("kernel_summary")
    values = sqllib.bind(cq, {"run_id": "b"})
    want = q.execute(con, cq, values)
    con.execute("DROP TABLE tracedb_live_files")
    assert q.execute(con, cq, values).equals(want) and want.num_rows > 0


@pytest.mark.parametrize("line,error", [
    ("-- scope: nope", "scope names nope, not a VARCHAR parameter"),
    ("-- scope: run_id limit", "scope names limit, not a VARCHAR parameter"),
])
def test_scope_must_name_run_parameters(line, error):
    text = ("-- title: t\n-- param: run_id VARCHAR NULL r\n-- param: limit BIGINT 5 l\n"
            f"{line}\nSELECT * FROM kernels WHERE run_id = $run_id LIMIT $limit")
    with pytest.raises(TracedbError, match=f"^mine.sql: {error}"):
        sqllib.parse(text, "mine", Path("mine.sql"))


def test_a_snapshot_an_older_tracedb_wrote_is_rebuilt_once(two_runs):
    """Its recorded state has no snapshot format: the first query rebuilds it (so the
    warehouse's queries get run scoping without waiting for the next ingest)."""
    import duckdb

    path = two_runs / "catalog.duckdb"
    con = duckdb.connect(str(path))
    state = json.loads(con.execute("SELECT value FROM tracedb_meta WHERE key = 'lake_state'").fetchall()[0][0])
    del state["format"]
    con.execute("UPDATE tracedb_meta SET value = ? WHERE key = 'lake_state'", [json.dumps(state)])
    con.execute("DROP TABLE tracedb_live_files")
    con.execute("DELETE FROM tracedb_meta WHERE key = 'view_parts'")
    con.close()
    assert q.run_query("kernel_summary", {"run_id": "a"}, two_runs).num_rows > 0
    con = duckdb.connect(str(path), read_only=True)
    runs = con.execute("SELECT DISTINCT run_lo FROM tracedb_live_files ORDER BY 1").fetchall()
    assert runs == [("a",), ("b",)]


def test_ad_hoc_sql_limited_to_runs(two_runs, fleet_warehouse):
    """`runs=`: the data views show only those runs; `runs`, `files` and `ingest_log` stay
    whole. Counts are the unscoped per-run counts, also where a file holds several runs
    (fleet_dev's six runs, one ingest) and so other runs' rows share the files bound."""
    import tracedb
    from tracedb.lake import Lake

    fleet = tracedb.Warehouse(fleet_warehouse)
    per_run = "SELECT run_id, count(*) AS n FROM kernels GROUP BY run_id ORDER BY run_id"
    whole = {r["run_id"]: r["n"] for r in fleet.sql(per_run).to_pylist()}
    assert len(whole) == 6 and len(Lake(fleet_warehouse).live_files("kernels")[0]) < 6  # files of several runs
    assert fleet.sql(per_run, runs=["mem512", "day2"]).to_pylist() == [
        {"run_id": r, "n": whole[r]} for r in ("day2", "mem512")]

    wh = tracedb.Warehouse(two_runs)
    per_run = "SELECT run_id, count(*) AS n FROM kernels GROUP BY run_id ORDER BY run_id"
    whole = {r["run_id"]: r["n"] for r in wh.sql(per_run).to_pylist()}
    assert set(whole) == {"a", "b"} and whole["a"] > 0
    assert wh.sql(per_run, runs=["b"]).to_pylist() == [{"run_id": "b", "n": whole["b"]}]
    assert wh.sql(per_run, runs=["a", "b"]).to_pylist() == wh.sql(per_run).to_pylist()
    assert wh.sql("SELECT count(*) AS n FROM runs", runs=["a"]).to_pylist() == [{"n": 2}]
    # a canned query too: top_kernels has no run column; limited to run a it counts a's kernels
    top = wh.query("top_kernels", runs=["a"], limit=100000)
    assert sum(top.column("instances").to_pylist()) == wh.sql(
        "SELECT count(*) AS n FROM kernels WHERE run_id = 'a' AND kind = 'kernel'").to_pylist()[0]["n"]
    with pytest.raises(TracedbError, match=r"^no run 'nope' in the warehouse \(--run"):
        wh.sql(per_run, runs=["a", "nope"])


def test_cli_run_option(two_runs):
    from typer.testing import CliRunner

    from tracedb.cli import app

    res = CliRunner().invoke(app, ["query", "-", "--run", "a", "--format", "csv", "--warehouse", str(two_runs)],
                             input="SELECT DISTINCT run_id FROM kernels\n")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ['"run_id"', '"a"']  # CSV quotes strings, as pyarrow's writer
    res = CliRunner().invoke(app, ["query", "-", "--run", "zz", "--warehouse", str(two_runs)],
                             input="SELECT 1\n")
    assert res.exit_code == 2 and "no run 'zz'" in res.output


def test_rollup_leaves_the_raw_views_unbound(two_runs):
    """With name_like and the steps NULL, `collectives` reads its metric's rollup alone
    (the metric's header says it serves those values), so a kernels file gone behind the
    snapshot's back does not matter (the whole `kernels` view would fail to bind); given a
    step range, or as its raw-row text, it reads raw rows and fails as before."""
    cq = sqllib.load("collectives")
    want = q.run_query(cq, {}, two_runs)
    remove_kernels_file_of(two_runs, "b")
    assert q.run_query(cq, {}, two_runs).equals(want)
    with pytest.raises(TracedbError, match="collectives: IOException"):
        q.run_query(dataclasses.replace(cq, text=""), {}, two_runs)  # no include to choose for: raw rows
    with pytest.raises(TracedbError, match="collectives: IOException"):
        q.run_query(cq, {"step_from": 1}, two_runs)


def test_rollup_with_a_default_reads_it_at_that_value(two_runs):
    """kernel_wait_ns's default (30000, in the metric idle_gaps.sql alone) is the threshold
    `rollup_stream_time` was computed with, so at that value, given or not,
    `idle_time_breakdown` reads the rollup alone (a kernels file gone behind the snapshot's
    back does not matter); any other value, NULL included, reads the raw rows."""
    cq = sqllib.load("idle_time_breakdown")
    assert cq.param("kernel_wait_ns").default == 30000
    metric = sqllib.load(str(Path(sqllib.sql_dir()) / "metrics" / "stream_time.sql"))
    assert metric.param("kernel_wait_ns").default == 30000 and "include:" not in metric.sql
    want = q.run_query(cq, {}, two_runs)
    assert want.num_rows and q.run_query(cq, {"kernel_wait_ns": 1000}, two_runs).num_rows
    remove_kernels_file_of(two_runs, "b")
    assert q.run_query(cq, {}, two_runs).equals(want)
    assert q.run_query(cq, {"kernel_wait_ns": 30000}, two_runs).equals(want)
    for values in ({"kernel_wait_ns": 1000}, {"kernel_wait_ns": None}, {"step_to": 5}):
        with pytest.raises(TracedbError, match="idle_time_breakdown: IOException"):
            q.run_query(cq, values, two_runs)
