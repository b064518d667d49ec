"""The rollups' Writer as the ingest's tail runs it (issue 12, session 7): its metrics on
as many threads as cores, costliest first, each metric's files written in its thread as it
finishes. What that must keep: every rollup row of a commit group lands under its own run
and kind, exactly the metric's rows for that run and kind from the raw rows; a metric that
fails leaves no file of the others behind."""

from __future__ import annotations

import pyarrow as pa
import pytest

from conftest import scenario
from tracedb import catalog, query, rollups, schema, sqllib
from tracedb.errors import TracedbError
from tracedb.ingest import ingest
from tracedb.lake import Lake


def test_every_rollup_is_scheduled_by_its_cost():
    """A rollup missing from COST_ORDER would start last whatever its cost."""
    assert sorted(rollups.COST_ORDER) == sorted(schema.ROLLUPS)


def test_rows_split_by_source_and_kind_whatever_the_kind_spells():
    """Run ids `<i>*` (every kind) and `<i>=<kind>`: the kind is all that follows the first
    '=', whatever it holds ('=', '*', a newline), and each source gets its own rows only."""
    ids = ["1*", "0=kernel", "0*", "1=a=b*", "0=x\ny", "1="]
    sch = schema.TABLES["rollup_stream_overlap"]
    rows = pa.table({f.name: (pa.array(ids) if f.name == "run_id" else pa.array(range(len(ids)), f.type)
                              if pa.types.is_integer(f.type) else pa.nulls(len(ids), f.type))
                     for f in sch if f.name != "kind"})
    zero, one = rollups.Writer._split("rollup_stream_overlap", rows, 2)
    assert zero.column_names == [n for n in sch.names if n != "run_id"]
    assert list(zip(zero.column("streams").to_pylist(), zero.column("kind").to_pylist())) == [
        (1, "kernel"), (2, None), (4, "x\ny")]
    assert list(zip(one.column("streams").to_pylist(), one.column("kind").to_pylist())) == [
        (0, None), (3, "a=b*"), (5, "")]


def test_rows_of_one_source_keep_their_kinds():
    """One source (a group of one run): every row is its own, with the kind its run id
    names, or none (`<0>*`), whether or not any row names one."""
    sch = schema.TABLES["rollup_stream_overlap"]

    def table(ids):
        return pa.table({f.name: (pa.array(ids, pa.string()) if f.name == "run_id" else pa.array(range(len(ids)), f.type)
                                  if pa.types.is_integer(f.type) else pa.nulls(len(ids), f.type))
                         for f in sch if f.name != "kind"})

    [every] = rollups.Writer._split("rollup_stream_overlap", table(["0*", "0*"]), 1)
    assert every.column_names == [n for n in sch.names if n != "run_id"]
    assert list(zip(every.column("streams").to_pylist(), every.column("kind").to_pylist())) == [(0, None), (1, None)]
    [mixed] = rollups.Writer._split("rollup_stream_overlap", table(["0=kernel", "0*", "0=x*"]), 1)
    assert list(zip(mixed.column("streams").to_pylist(), mixed.column("kind").to_pylist())) == [
        (0, "kernel"), (1, None), (2, "x*")]
    [none] = rollups.Writer._split("rollup_stream_overlap", table([]), 1)
    assert none.num_rows == 0 and none.schema.field("kind").type == pa.string()


def _run_files(wh, run: str) -> tuple[str, list[str]]:
    lake = Lake(wh)
    published = lake.published()
    files = [p for t in rollups.WHOLE_SOURCES for r, p in lake.live_files_by_run(t, published)[0] if r == run]
    return published[run], sorted(files)


def test_a_commit_group_rolls_up_each_run_and_kind_as_its_raw_rows_do(tmp_path):
    """Three runs (Kineto: kernels, copies and sets; TF: two kinds; MegEngine: kernels
    only) in one write: each run's rows of the two `kind` rollups, per kind, are the
    metric's own rows from that run's raw rows with run_id and kind bound."""
    wh = tmp_path / "wh"
    names = {"k": "kineto_h200_fp32", "t": "tf_stepstats_gpu_streams", "m": "megengine_graph_profile"}
    for run, name in names.items():
        assert ingest([scenario(name)], wh, run_id=run).ok
    runs = [(run, *_run_files(wh, run)) for run in names]
    roll = rollups.Writer()
    try:
        written = roll.write_runs(wh, runs, tables=["rollup_gpu_busy_idle", "rollup_stream_overlap"], tag="again")
    finally:
        roll.close()
    assert {(f.run_id, f.table) for f in written} == {(r, t) for r in names
                                                       for t in ("rollup_gpu_busy_idle", "rollup_stream_overlap")}
    con = catalog.connect(wh)
    try:
        kinds = dict(con.execute("SELECT run_id, list(DISTINCT kind ORDER BY kind) FROM kernels GROUP BY 1").fetchall())
        assert kinds == {"k": ["kernel", "memcpy", "memset"], "t": ["kernel", "memcpy"], "m": ["kernel"]}
        for run in names:
            for table in ("rollup_gpu_busy_idle", "rollup_stream_overlap"):
                paths = [str(wh / f.rel) for f in written if (f.run_id, f.table) == (run, table)]
                cur = con.execute("SELECT * EXCLUDE (ingest_id) FROM read_parquet(?, hive_partitioning = true)", [paths])
                got = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
                metric = rollups.metrics()[table]
                for kind in (None, *kinds[run]):  # the metric from raw rows
                    want = query.execute(con, metric, sqllib.bind(metric, {"run_id": run, "kind": kind}),
                                         rollups=False).to_pylist()
                    mine = [{c: r[c] for c in want[0]} for r in got if r["kind"] == kind]
                    assert len(want) > 0 and sorted(map(repr, mine)) == sorted(map(repr, want)), (table, run, kind)
    finally:
        con.close()


def test_a_failing_metric_leaves_no_file_of_the_others(tmp_path):
    """The cheapest metric starts last and fails (DuckDB's `error()`): the error names it,
    and the files the other metrics wrote meanwhile are gone."""
    wh = tmp_path / "wh"
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="k").ok
    ingest_id, files = _run_files(wh, "k")
    before = sorted(p.relative_to(wh) for p in wh.rglob("*.parquet"))
    roll = rollups.Writer()
    try:
        last = rollups.COST_ORDER[-1]
        broken = roll.con.extract_statements("SELECT error('a broken metric')")[0]
        roll.metrics[last] = roll.metrics[last]._replace(statement=broken, values={})
        with pytest.raises(TracedbError, match=f"{schema.ROLLUPS[last]}: .*a broken metric"):
            roll.write_runs(wh, [("k", ingest_id, files)], tag="broken")
    finally:
        roll.close()
    assert sorted(p.relative_to(wh) for p in wh.rglob("*.parquet")) == before


def test_a_commit_after_another_writer_changed_the_preloaded_lake(tmp_path, monkeypatch):
    """The ingest reads the lake's logs while its files are read (`Lake.preload`), before it
    holds the commit lock: another writer that removes run a and re-ingests run b (now a
    Kineto trace) in between leaves the commit with handles and live files of older
    versions, which it must bring up to date: a stays removed, b shows its new version's
    rows only (as many kernels as the raw trace has), c lands, `check` finds every live file
    intact."""
    import rawtrace
    from tracedb import Warehouse
    from tracedb import ingest as ing

    wh = tmp_path / "wh"
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="a").ok
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="b").ok
    preload = ing._Landing._preload
    seen = []

    def meanwhile(self):
        preload(self)
        if not seen:  # another process's commits, after this one's reads of the logs
            seen.append(self.store.versions())
            Warehouse(wh).rm("a")
            assert ingest([scenario("kineto_h200_fp32")], wh, run_id="b").ok

    monkeypatch.setattr(ing._Landing, "_preload", meanwhile)
    assert ingest([scenario("megengine_graph_profile")], wh, run_id="c").ok
    assert Lake(wh).versions()["kernels"] > seen[0]["kernels"]
    kernels = len(rawtrace.kineto(rawtrace.load_kineto_json(scenario("kineto_h200_fp32"))).kernels)
    w = Warehouse(wh)
    con = w.connect()
    try:
        assert con.execute("SELECT run_id FROM runs ORDER BY 1").fetchall() == [("b",), ("c",)]
        assert con.execute("SELECT count(*) FROM kernels WHERE run_id = 'b'").fetchone()[0] == kernels
        assert con.execute("SELECT count(*) FROM kernels WHERE run_id = 'a'").fetchone()[0] == 0
        for table in schema.ROLLUP_TABLES:
            runs = {r for (r,) in con.execute(f"SELECT DISTINCT run_id FROM {table}").fetchall()}
            assert "a" not in runs and runs <= {"b", "c"}, table
        assert con.execute("SELECT count(*) FROM rollup_stream_overlap WHERE run_id = 'b' AND kind = 'memset'"
                           ).fetchone()[0] == 1  # the Kineto version's (the TF trace has no memsets)
    finally:
        con.close()
    assert w.check() == []


def test_small_and_large_groups_roll_up_stream_time_as_its_raw_rows_do(tmp_path):
    """A small group's stream_time is computed by the metric's declaration, a larger one's
    by its streamed text (`rollups.DECLARED_WHEN_SMALL`): both rows are the metric's own
    from the raw rows, run by run."""
    wh = tmp_path / "wh"
    names = {"k": "kineto_h200_fp32", "t": "tf_stepstats_gpu_streams"}
    for run, name in names.items():
        assert ingest([scenario(name)], wh, run_id=run).ok
    runs = [(run, *_run_files(wh, run)) for run in names]
    table = "rollup_stream_time"
    assert table in rollups.DECLARED_WHEN_SMALL
    metric = rollups.metrics()[table]
    assert metric.rollup_sql and metric.rollup_sql != metric.sql
    got = {}
    roll = rollups.Writer()
    try:
        for size, rows in (("small", 1), ("large", rollups.SMALL_ROWS + 1)):
            written = roll.write_runs(wh, runs, tables=[table], tag=size, rows=rows)
            got[size] = {f.run_id: str(wh / f.rel) for f in written}
    finally:
        roll.close()
    con = catalog.connect(wh)
    try:
        for run in names:
            want = query.execute(con, metric, sqllib.bind(metric, {"run_id": run}), rollups=False).to_pylist()
            assert len(want) >= 1
            for size in got:
                cur = con.execute("SELECT * EXCLUDE (ingest_id) FROM read_parquet(?)", [got[size][run]])
                mine = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
                assert sorted(map(repr, ({c: r[c] for c in want[0]} for r in mine))) == sorted(map(repr, want)), (run, size)
    finally:
        con.close()
