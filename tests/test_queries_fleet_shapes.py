"""Canned queries rewritten for fleet scale (issue 12) give the rows of their old text.

A regression check against the queries' own past text, not an oracle: each of these
queries also has a test whose expected rows are worked out from the raw trace (plain
`json`/`sqlite3`, tests/rawtrace.py) or by HTA (tests/test_queries_*.py,
tests/test_multirank.py, tests/test_format_nsys.py).

`data/sql_before_issue12/` holds the queries as they were: top_kernels with an exact
median from row_number() windows, top_ops and kernel_summary with a window total that
DuckDB turns into a self-join reading every run's files, megengine_op_types joining
`nodes` without the run filter, stream_overlap and gpu_busy_idle numbering busy islands
with a second window and grouping by them, collectives merging every compute kernel of a
device into islands before looking at the collectives; fourth pass: kernel_type_breakdown,
temporal_breakdown, comm_comp_overlap and step_times numbering islands with two windows
(now one running maximum each), idle_time_breakdown and queue_length windowed per file and
stream (now per run and device), queue_length numbering every change for its percentiles,
fleet_trend scanning each table three times, kernel_duration_histogram a window over its
groups that DuckDB answered with a second scan. The new ones must return identical tables (values, types, order) on the seed
warehouse and on a small fleet, for every run and for the whole fleet; speed is measured
in bench/, not here.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
import sqlglot

from tracedb import catalog, rollups
from tracedb import dialects
from tracedb import query as q
from tracedb import sqllib
from tracedb.ingest import ingest

from conftest import scenario

BEFORE = Path(__file__).parent / "data" / "sql_before_issue12"
NAMES = ["top_kernels", "top_ops", "megengine_op_types", "kernel_type_breakdown", "temporal_breakdown",
         "comm_comp_overlap", "step_times", "idle_time_breakdown", "queue_length", "fleet_trend", "kernel_duration_histogram",
         "stream_overlap", "collectives", "gpu_busy_idle", "kernel_summary", "memory_bandwidth",
         "kernel_launch_config", "kernel_launch_stats"]
# Besides run_id (every run and NULL), limit and order_by: the other parameters, each
# alone, then step windows with a device and a kind together.
VARIATIONS = [{}, {"device": "GPU:0"}, {"kind": None}, {"kind": "kernel"}, {"kind": "memcpy"},
              {"step_from": 1}, {"step_to": 1}, {"step_from": 1, "step_to": 2}, {"step_from": 2, "step_to": 2},
              {"step_from": 0, "step_to": 3, "device": "GPU:0", "kind": "kernel"},
              {"step_from": 5}, {"step_to": 5}, {"step_from": 552, "step_to": 552},
              {"step_from": 551, "device": "GPU:1"},
              {"name_like": "%gemm%"}, {"name_like": "%"}, {"rank": 0}, {"rank": 1},
              {"bucket_ns": 1000}, {"bucket_ns": 7, "device": "GPU:0", "kind": None},
              {"kernel_wait_ns": 30000, "rank": 0}, {"kernel_wait_ns": 1000}, {"kernel_wait_ns": None},
              {"runtime_cutoff_ns": 5000, "launch_delay_cutoff_ns": 0, "rank": 0, "step_to": 552}]
# Columns whose meaning changed on purpose since: schema 7's host step is the step
# marker's span (issue 24 item 3), checked against the raw traces in
# tests/test_step_markers.py; the rest of each row must stay as it was.
CHANGED = {"step_times": ["host_start_ns", "host_step_ns"], "fleet_trend": ["mean_host_step_ns"]}
# Three formats, two runs each; the same trace twice makes ties across runs.
FLEET = {f"{name}_{i}": name for name in ("kineto_h200_fp32", "tf_stepstats_gpu_streams",
                                          "megengine_graph_profile") for i in (1, 2)}
# NCCL traces (one and two ranks): collectives overlapping compute on other streams.
NCCL = ["hta_nccl_allreduce", "hta_nccl_two_ranks"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("fleet") / "wh"
    for run_id, name in FLEET.items():
        assert ingest([scenario(name)], wh, run_id=run_id).ok
    for name in NCCL:
        assert ingest([Path(__file__).parent / "data" / name], wh, run_id=name).ok
    return wh


def param_sets(cq, runs):
    """Every combination of order, limit and variation for the whole fleet and for two runs,
    the runs rotating through the warehouse's (each run meets many combinations, each
    combination two runs: about a third of the full cross product, whose old texts cost
    ~250 s of CPU), then every run at the defaults; all of the product where it is small."""
    names = {p.name for p in cq.params}
    choices = cq.param("order_by").choices if "order_by" in names else [None]
    variations = [v for v in VARIATIONS if set(v) <= names]
    combos = [(order, limit, extra) for order in choices for limit in ((5, 100000) if "limit" in names else (None,))
              for extra in variations]
    if len(combos) * (1 + len(runs)) <= 64:  # few: all of them
        cases = [(run, c) for c in combos for run in (None, *runs)]
    else:
        cases = [(run, c) for k, c in enumerate(combos) for run in (None, runs[k % len(runs)], runs[(k + 3) % len(runs)])]
        cases += [(run, (choices[0], None, {})) for run in runs]
    for run, (order, limit, extra) in cases:
        if "run_id" not in names:  # fleet_trend: no run_id
            if run is not None:
                continue
            values = dict(extra)
        else:
            values = {"run_id": run, **extra}
        if limit is not None:
            values["limit"] = limit
        if order:
            values["order_by"] = order
        yield values


@pytest.mark.parametrize("where", ["seed", "fleet"])
@pytest.mark.parametrize("name", NAMES)
def test_rows_identical_to_the_old_query(name, where, seed_warehouse, fleet):
    wh = seed_warehouse if where == "seed" else fleet
    new, old = sqllib.load(name), sqllib.load(BEFORE / f"{name}.sql")
    con = catalog.connect(wh)
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    nonempty = 0
    for values in param_sets(new, runs):
        values = sqllib.bind(new, values)
        want, got = (t.drop_columns(CHANGED.get(name, [])) for t in (q.execute(con, old, values), q.execute(con, new, values)))
        assert got.schema == want.schema, (name, values)
        assert got.equals(want), (name, values)
        nonempty += got.num_rows > 0
    # the comparison saw real rows, not only empty tables (the seeds have no communication
    # kernels; fleet_trend has one table per warehouse)
    needed = 0 if (name, where) == ("comm_comp_overlap", "seed") else 3 if new.param("run_id") else 1
    assert nonempty >= needed
    if name == "collectives" and where == "fleet":  # collectives partly overlapped by compute
        rows = q.execute(con, new, sqllib.bind(new, {})).to_pylist()
        assert {r["run_id"] for r in rows} == set(NCCL)
        assert any(0 < r["overlapped_ns"] < r["total_ns"] for r in rows)


def _text(cq, values) -> str:
    """The query's text for these values (a metric's rollup where it serves them), and its values."""
    sql = cq.sql_for(values)
    return "\n".join(ln for ln in sql.splitlines() if not ln.startswith("-- ")), {
        k: v for k, v in values.items() if k in sqllib.bound_names(sql)}


def _files_read(con, cq, values) -> list[int]:
    """Files read by each Parquet scan of a data table (the plan's scans of the `runs`
    table's own files, for the live-ingest filter, left out: they are the same few
    whatever the runs asked for, and differ with the number of ingests)."""
    import json

    from tracedb import snapshot

    body, values = _text(cq, values)
    # as the query runner does for a run (`-- scope:`): views over that run's files; the
    # snapshot's own views list every file, and the scan skips other runs' row groups
    made = snapshot.scope_to_runs(con, [values["run_id"]], body) if values.get("run_id") else []
    try:
        plan = json.loads(con.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + body, values).fetchall()[0][1])
    finally:
        snapshot.unscope(con, made or [])
    out = []

    def walk(node):
        info = node.get("extra_info", {})
        if info.get("Function") == "READ_PARQUET" and "/runs/" not in str(info.get("Filename(s)", "")):
            out.append(int(info.get("Total Files Read", 0)))
        for child in node.get("children", []):
            walk(child)

    for op in plan["operator"]:
        walk(op)
    return out


@pytest.mark.parametrize("name,run", [("top_ops", "tf_stepstats_gpu_streams"),
                                      ("kernel_summary", "kineto_h200_fp32"),
                                      ("top_kernels", "kineto_h200_fp32"),
                                      ("megengine_op_types", "megengine_graph_profile")])
def test_one_run_reads_only_that_runs_files(name, run, seed_warehouse, fleet):
    """Files read per scan for one run are the same in the seed warehouse (7 runs) and in
    the fleet (6 other runs, this trace under another run id): no scan reads other runs."""
    seed, other = catalog.connect(seed_warehouse), catalog.connect(fleet)
    cq = sqllib.load(name)
    counts = _files_read(seed, cq, sqllib.bind(cq, {"run_id": run}))
    if not counts:
        pytest.skip("this DuckDB's plan does not report files read")
    assert counts == _files_read(other, cq, sqllib.bind(cq, {"run_id": run + "_1"}))
    # the count can tell: the same query over the whole fleet reads more files (a scan a file)
    # (each run here is an ingest of its own, so a file of its own)
    assert sum(_files_read(other, cq, sqllib.bind(cq, {}))) > sum(counts)


def test_trino_median_is_exact():
    """Trino has no exact median; the rewrite sorts the values and takes the middle one or
    two. Checked by reading the Trino SQL back into DuckDB (Trino's `/` on BIGINTs is
    integer division: `//` in DuckDB) and comparing with DuckDB's median()."""
    out = dialects.transpile(sqllib.load("top_kernels"), "trino", {"limit": "10"})  # run_id: its default, NULL
    assert "ELEMENT_AT(ARRAY_SORT(ARRAY_AGG(duration_ns))" in out
    assert not re.search(r"\b(MEDIAN|PERCENTILE_CONT|APPROX_PERCENTILE)\(", out)
    assert "MEDIAN(duration_ns)" in dialects.transpile(sqllib.load("top_kernels"), "spark")
    body = "\n".join(ln for ln in out.splitlines() if not ln.startswith("-- "))
    back = sqlglot.transpile(body, read="trino", write="duckdb")[0]
    back = back.replace(") / 2]", ") // 2]").replace("/ 2 + 1]", "// 2 + 1]")
    con = duckdb.connect()
    con.execute("CREATE TABLE kernels AS SELECT * FROM (VALUES "
                "('a', 'kernel', 5), ('a', 'kernel', 1), ('a', 'kernel', 3),"  # odd: 3
                "('b', 'kernel', 10), ('b', 'kernel', 2), ('b', 'kernel', 7), ('b', 'kernel', 1),"  # even: 4.5
                "('c', 'kernel', 4), ('c', 'kernel', NULL), ('c', 'kernel', 9),"  # NULL skipped: 6.5
                "('d', 'kernel', NULL), ('e', 'memcpy', 8)"  # no values: NULL
                ") t(name, kind, duration_ns)")
    con.execute("ALTER TABLE kernels ADD COLUMN run_id VARCHAR DEFAULT 'r'")
    rows = con.execute(back).fetchall()
    medians = {r[0]: r[4] for r in rows}
    assert medians == {"a": 3.0, "b": 4.5, "c": 6.5, "d": None}
    want = con.execute("SELECT name, median(duration_ns) FROM kernels WHERE kind = 'kernel' GROUP BY name").fetchall()
    assert medians == dict(want)


def _scanned(con, cq, values) -> str:
    body, values = _text(cq, values)
    return con.execute("EXPLAIN ANALYZE " + body, values).fetchall()[0][1]


@pytest.mark.parametrize("name", ["gpu_busy_idle", "stream_overlap"])
def test_fleet_wide_reads_the_rollup_not_the_activity_rows(name, fleet):
    """Fleet-wide (and per run, device, kind), the query reads `rollup_<name>`, written at
    ingest, and no `kernels` file; stream_overlap over a step range reads the raw rows."""
    con = catalog.connect(fleet)
    cq = sqllib.load(name)
    for values in ({}, {"kind": "memcpy"}, {"run_id": "kineto_h200_fp32_1", "device": "GPU:0"}):
        plan = _scanned(con, cq, sqllib.bind(cq, values))
        assert f"/rollup_{name}/" in plan and "/kernels/" not in plan, values
    ranged = _scanned(con, cq, sqllib.bind(cq, {"step_from": 1}))
    assert ("/kernels/" in ranged) == (name == "stream_overlap")


def test_collectives_fleet_wide_reads_the_rollup_not_the_kernels(fleet):
    """Without name_like or a step range (the fleet, a run, a device) `collectives` reads
    `rollup_collectives` and no `kernels` file; with either it reads the raw rows."""
    con = catalog.connect(fleet)
    cq = sqllib.load("collectives")
    for values in ({}, {"device": "GPU:1"}, {"run_id": "hta_nccl_two_ranks", "device": "GPU:0"}):
        plan = _scanned(con, cq, sqllib.bind(cq, values))
        assert "/rollup_collectives/" in plan and "/kernels/" not in plan, values
    for values in ({"name_like": "%gemm%"}, {"step_from": 1}, {"run_id": "hta_nccl_allreduce", "step_to": 3}):
        assert "/kernels/" in _scanned(con, cq, sqllib.bind(cq, values)), values
    assert q.execute(con, cq, sqllib.bind(cq, {})).num_rows == 4  # the NCCL runs' four (device, name) pairs


# Runs with gaps between timed activities on a stream (every one); those with launch times
# for queue_length (TF step stats have none); those with copies or sets (MegEngine: none).
WITH_STREAMS = {"idle_time_breakdown": set(FLEET) | set(NCCL),
                "queue_length": {r for r in FLEET if r.startswith("kineto")} | set(NCCL),
                "memory_bandwidth": {r for r in FLEET if not r.startswith("megengine")} | set(NCCL)}


@pytest.mark.parametrize("name", ["idle_time_breakdown", "queue_length", "memory_bandwidth"])
def test_interval_queries_read_their_rollup_not_the_kernels(name, fleet):
    """Fleet-wide, per run and per rank (at the default kernel_wait_ns, given or not) the
    queries read their rollup (`rollup_stream_time`, `rollup_memory_bandwidth`) and no
    `kernels` file; a step range or another threshold reads the raw rows."""
    con = catalog.connect(fleet)
    cq = sqllib.load(name)
    table = "rollup_memory_bandwidth" if name == "memory_bandwidth" else "rollup_stream_time"
    defaults = [{}, {"run_id": "hta_nccl_two_ranks"}]
    if cq.param("rank"):
        defaults += [{"rank": 0}, {"run_id": "hta_nccl_two_ranks", "rank": 1}]
    if name == "idle_time_breakdown":
        defaults.append({"kernel_wait_ns": 30000})
    for values in defaults:
        plan = _scanned(con, cq, sqllib.bind(cq, values))
        assert f"/{table}/" in plan and "/kernels/" not in plan, values
    raw = [{"step_from": 1}, {"run_id": "hta_nccl_two_ranks", "step_to": 551}]
    if name == "idle_time_breakdown":
        raw += [{"kernel_wait_ns": 1000}, {"kernel_wait_ns": None}]
    for values in raw:
        assert "/kernels/" in _scanned(con, cq, sqllib.bind(cq, values)), values
    got = {r["run_id"] for r in q.execute(con, cq, sqllib.bind(cq, {})).to_pylist()}
    assert got == WITH_STREAMS[name], got


@pytest.mark.parametrize("name", ["kernel_type_breakdown", "temporal_breakdown", "comm_comp_overlap"])
def test_interval_queries_read_the_device_time_rollup(name, fleet):
    """Without a step range (the fleet, a run) the three interval queries read
    `rollup_device_time` and no `kernels` file; with one they read the raw rows."""
    con = catalog.connect(fleet)
    cq = sqllib.load(name)
    for values in ({}, {"run_id": "hta_nccl_two_ranks"}):
        plan = _scanned(con, cq, sqllib.bind(cq, values))
        assert "/rollup_device_time/" in plan and "/kernels/" not in plan, values
    for values in ({"step_from": 1}, {"run_id": "hta_nccl_two_ranks", "step_to": 551}):
        plan = _scanned(con, cq, sqllib.bind(cq, values))
        assert "/kernels/" in plan and "/rollup_device_time/" not in plan, values


@pytest.mark.parametrize("name", ["step_times", "kernel_launch_config", "kernel_launch_stats"])
def test_rollup_only_queries_read_no_raw_rows(name, fleet):
    """step_times, kernel_launch_config and kernel_launch_stats read only their rollups
    (fleet, run, device, rank, steps): no `nodes`, `kernels` or `runtime_calls` file."""
    con = catalog.connect(fleet)
    cq = sqllib.load(name)
    table = {"kernel_launch_stats": "rollup_kernel_launches"}.get(name, f"rollup_{name}")
    for values in ({}, {"run_id": "kineto_h200_fp32_1"}, {"device": "GPU:0"},
                   {"rank": 0, "step_from": 1, "runtime_cutoff_ns": 1}):
        values = {k: v for k, v in values.items() if cq.param(k)}
        plan = _scanned(con, cq, sqllib.bind(cq, values))
        assert f"/{table}/" in plan, values
        assert not any(f"/{t}/" in plan for t in ("kernels", "nodes", "runtime_calls")), values


def test_rollups_follow_the_runs_live_version(tmp_path):
    """A re-ingest replaces the run's rollup rows with the new version's (the old ones go
    with the old files); a run whose ingest fails keeps its old rollup; a run without GPU
    activity has none."""
    wh = tmp_path / "wh"
    assert ingest([scenario("megengine_graph_profile")], wh, run_id="r").ok
    assert ingest([scenario("tf_runmetadata_text")], wh, run_id="cpu").ok
    con = catalog.connect(wh)
    sql = "SELECT kind, streams FROM rollup_stream_overlap WHERE run_id = 'r' ORDER BY kind NULLS FIRST"
    first = con.execute(sql).fetchall()
    assert first[0] == (None, 1)  # MegEngine: no stream ids, one stream
    assert con.execute("SELECT count(*) FROM rollup_gpu_busy_idle WHERE run_id = 'cpu'").fetchall() == [(0,)]
    con.close()
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="r").ok
    con = catalog.connect(wh)
    assert con.execute(sql).fetchall()[0] == (None, 3)  # the TF trace's three streams
    assert con.execute("SELECT count(DISTINCT kind IS NULL) FROM rollup_stream_overlap WHERE run_id = 'r'").fetchall() == [(2,)]
    new = sqllib.load("stream_overlap")
    assert q.execute(con, new, sqllib.bind(new, {"run_id": "r"})).equals(
        q.execute(con, sqllib.load(str(BEFORE / "stream_overlap.sql")), sqllib.bind(new, {"run_id": "r"})))
    con.close()
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    assert not ingest([bad], wh, run_id="r").ok
    con = catalog.connect(wh)
    assert con.execute(sql).fetchall()[0] == (None, 3)


# Interval sweeps (fourth pass): unions by a running maximum instead of numbered islands.
SWEPT = ["kernel_type_breakdown", "temporal_breakdown", "comm_comp_overlap"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sweeps_equal_islands_on_dense_overlaps(seed):
    """The traces rarely overlap communication, memory and computation on one device; here
    3,000 random activities of every type and kind on three ranks (0, 1, NULL) on each run
    and device, with nested,
    touching, identical and zero-length intervals, put every set of types in play. Each
    rewritten query gives the old text's table, fleet-wide and per run from the rollup
    (`rollup_device_time`, made here by its metric as the ingest makes it) and per step
    window from the raw rows."""
    con = duckdb.connect()
    con.execute(f"SELECT setseed(0.{seed})")
    con.execute("""
        CREATE TABLE kernels AS
        SELECT 'r' || (i % 2) AS run_id, [NULL, 1, 0][1 + i % 3] AS rank,
               'GPU:' || (i % 2) AS device, CAST(i % 4 AS BIGINT) AS step,
               CASE WHEN random() < 0.15 THEN 'memcpy' ELSE 'kernel' END AS kind,
               ['computation', 'communication', 'memory', NULL][1 + CAST(floor(random() * 3.2) AS INT)]
                   AS kernel_type,
               CAST(floor(random() * 200) * 10 AS BIGINT) AS start_ns,
               CAST(CASE WHEN random() < 0.1 THEN 0 ELSE floor(random() * 60) * 5 END AS BIGINT) AS duration_ns
        FROM range(3000) t(i)""")
    # whole runs read the rollup: what the ingest writes, the metric's rows (it keeps runs apart)
    metric = rollups.metrics()["rollup_device_time"]
    rollup = q.execute(con, metric, sqllib.bind(metric, {}), rollups=False)
    assert rollup.num_rows == 2 * 3  # r0 on GPU:0 and r1 on GPU:1, three ranks each
    con.register("rollup_arrow", rollup)
    con.execute("CREATE TABLE rollup_device_time AS SELECT * FROM rollup_arrow")
    states = set()
    for name in SWEPT:
        new, old = sqllib.load(name), sqllib.load(BEFORE / f"{name}.sql")
        for extra in ({}, {"step_from": 1}, {"step_from": 1, "step_to": 2}, {"run_id": "r1"}):
            values = sqllib.bind(new, extra)
            want, got = q.execute(con, old, values), q.execute(con, new, values)
            assert got.schema == want.schema and got.equals(want), (name, extra)
            assert got.num_rows > 0
            if name == "kernel_type_breakdown":
                states |= set(got.column("kernel_types").to_pylist())
    assert len(states) == 7  # every combination of the three types occurred
