"""Migrations against a frozen warehouse made before migration 0002 (ingest log)."""

from __future__ import annotations

import itertools
import re
import shutil

import duckdb
import pytest
from typer.testing import CliRunner

from conftest import DATA, data_files, scenario
from tracedb import catalog, migrate, schema
from tracedb.cli import app
from tracedb.errors import TracedbError
from tracedb.ingest import ingest
from tracedb.migrate import migrate_warehouse as catalog_migrate

# The migrations after 0008, which every older lake also gets (each has its own test on
# the frozen lake of the schema before it).
LATER = [f"{m.number:04d}_{m.name}" for m in migrate.discover() if m.number > 8]

FROZEN = DATA / "frozen_warehouse_m0001"


@pytest.fixture
def old_warehouse(tmp_path):
    wh = tmp_path / "old"
    shutil.copytree(FROZEN, wh)
    return wh


def test_migrations_are_numbered_and_discovered_by_sorting():
    found = migrate.discover()
    assert [m.number for m in found] == list(range(1, len(found) + 1))
    assert [m.name for m in found[:3]] == ["catalog_tables", "ingest_log", "file_metadata"]


def test_old_warehouse_refuses_until_migrated(old_warehouse):
    with pytest.raises(TracedbError, match="tracedb migrate"):
        catalog.connect(old_warehouse)
    with pytest.raises(TracedbError, match="0002_ingest_log"):
        ingest([scenario("node_name_list")], old_warehouse)


def test_migrate_brings_frozen_warehouse_up_to_date(old_warehouse):
    result = CliRunner().invoke(app, ["migrate", "--warehouse", str(old_warehouse)])
    assert result.exit_code == 0, result.output
    assert "0002_ingest_log, 0003_file_metadata, 0004_delta_lake" in result.output
    con = catalog.connect(old_warehouse)
    assert con.execute("SELECT count(*) FROM nodes").fetchone()[0] == 178
    # the old warehouse's one ingested file was carried into the new log
    assert con.execute("SELECT run_id, path, status FROM ingest_log").fetchall() == [
        ("alexnet_dump", "002_11cf062b29f34b60.txt", "ok")]
    applied = con.execute("SELECT number FROM tracedb_migrations ORDER BY 1").fetchall()
    assert applied == [(m.number,) for m in migrate.discover()]
    con.close()
    # idempotent; and the warehouse takes new runs again
    assert catalog_migrate(old_warehouse) == []
    assert ingest([scenario("node_name_list")], old_warehouse).ok
    con = catalog.connect(old_warehouse)
    assert con.execute("SELECT count(*) FROM ingest_log").fetchone()[0] == 2


FROZEN_SCHEMA1 = DATA / "frozen_warehouse_schema1"
# What the schema-1 warehouse held, read from its catalog with plain DuckDB (no tracedb).
def _schema1_facts(wh):
    con = duckdb.connect(str(wh / "catalog.duckdb"), read_only=True)
    con.execute(f"SET file_search_path = '{wh}'")
    facts = {}
    for table in ("nodes", "kernels", "tensors", "allocations"):
        facts[table] = con.execute(
            f"SELECT run_id, device, count(*) FROM {table} GROUP BY ALL ORDER BY ALL").fetchall()
    facts["kernel_ns"] = con.execute("SELECT run_id, sum(duration_ns) FROM kernels GROUP BY 1 ORDER BY 1").fetchall()
    facts["runs"] = con.execute("SELECT run_id, model, \"commit\", started_at, labels FROM tracedb_runs ORDER BY 1").fetchall()
    facts["files"] = con.execute("SELECT run_id, path, status, sha256 FROM tracedb_files ORDER BY ALL").fetchall()
    facts["log"] = con.execute("SELECT run_id, path, status, ingest_id FROM tracedb_ingest_log ORDER BY ALL").fetchall()
    con.close()
    return facts


def test_schema1_warehouse_is_converted_to_delta_lake_in_place(tmp_path):
    """The frozen schema-1 warehouse (two runs with labels, a re-ingested run, a failed
    attempt) becomes a lake: nothing lost, every engine reads it."""
    import polars as pl
    from deltalake import DeltaTable

    wh = tmp_path / "wh"
    shutil.copytree(FROZEN_SCHEMA1, wh)
    want = _schema1_facts(wh)
    with pytest.raises(TracedbError, match="0004_delta_lake"):
        catalog.connect(wh)
    assert catalog_migrate(wh) == ["0004_delta_lake", "0005_pytorch_depth", "0006_rollups", "0007_rollup_collectives",
                                 "0008_interval_rollups", *LATER]
    con = catalog.connect(wh)
    for table in ("nodes", "kernels", "tensors", "allocations"):
        assert con.execute(f"SELECT run_id, device, count(*) FROM {table} GROUP BY ALL ORDER BY ALL").fetchall() == want[table]
    assert con.execute("SELECT run_id, sum(duration_ns) FROM kernels GROUP BY 1 ORDER BY 1").fetchall() == want["kernel_ns"]
    assert con.execute("SELECT run_id, model, \"commit\", started_at, labels FROM runs ORDER BY 1").fetchall() == want["runs"]
    assert con.execute("SELECT batch FROM runs WHERE run_id = 'lstm'").fetchone() == ("32",)
    assert con.execute("SELECT run_id, path, status, sha256 FROM files ORDER BY ALL").fetchall() == want["files"]
    assert con.execute("SELECT run_id, path, status, ingest_id FROM ingest_log ORDER BY ALL").fetchall() == want["log"]
    # the lake is Delta: delta-rs and polars read it without tracedb
    assert DeltaTable(str(wh / "kernels")).to_pyarrow_table().num_rows == 755 + 234
    assert pl.read_delta(str(wh / "runs")).height == 2
    # the schema-1 files were deleted once the lake was committed; only the lake's remain:
    # 0004's (.v2) and, for nodes, 0012's rewrite of each of them (.v2.m<ms>: flops filled),
    # dead on disk until vacuum, and 0013's files of many runs, the live ones
    import re

    lake_file = re.compile(r"(\.v2(\.m\d+)?|/part-m0013-\d{6}-[0-9a-f]{8})\.parquet$")
    assert all(lake_file.search(p) for p in data_files(wh) if not p.startswith("rollup_"))
    from tracedb.lake import Lake

    assert all("/part-m0013-" in p for p in Lake(wh).live_files("kernels")[0])
    # 0006 computed both runs' rollups (each has timed GPU activity)
    assert con.execute("SELECT DISTINCT run_id FROM rollup_stream_overlap ORDER BY 1").fetchall() == [
        (r,) for (r,) in con.execute("SELECT DISTINCT run_id FROM kernels ORDER BY 1").fetchall()]
    # and the canned queries run on it
    assert ingest([scenario("node_name_list")], wh, run_id="names").ok
    assert catalog_migrate(wh) == []


def test_schema1_conversion_killed_anywhere_leaves_a_warehouse_a_rerun_completes(tmp_path):
    """SIGKILL during `tracedb migrate` at several points: the schema-1 warehouse is still
    readable as before (or already converted), and a rerun completes the conversion."""
    import signal
    import subprocess
    import sys
    import time

    want = None
    for delay in (0.3, 0.8, 1.3, 1.8, 2.5):
        wh = tmp_path / f"wh{delay}"
        shutil.copytree(FROZEN_SCHEMA1, wh)
        want = want or _schema1_facts(wh)
        p = subprocess.Popen([sys.executable, "-m", "tracedb.cli", "migrate", "-w", str(wh)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if catalog.is_legacy(wh):  # not yet committed: the old warehouse is intact
            assert _schema1_facts(wh) == want
        catalog_migrate(wh)
        con = catalog.connect(wh)
        assert con.execute("SELECT run_id, device, count(*) FROM kernels GROUP BY ALL ORDER BY ALL").fetchall() == want["kernels"]
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
        con.close()


def test_conform_lake_table_adds_a_missing_column(tmp_path):
    """What a future migration that adds a column does to the files written before it."""
    import pyarrow.parquet as pq

    from tracedb.lake import Lake

    wh = tmp_path / "wh"
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="lstm").ok
    lake = Lake(wh)
    [path] = lake.live_files("kernels")[0]
    old = pq.read_table(wh / path).drop_columns(["occupancy"])  # as an older tracedb wrote it
    pq.write_table(old, wh / path)
    assert migrate.conform_lake_table(lake, "kernels") == 1
    assert migrate.conform_lake_table(lake, "kernels") == 0  # idempotent
    with lake.lock():
        catalog.publish(lake)
    con = catalog.connect(wh)
    assert con.execute("SELECT count(*), count(occupancy), sum(duration_ns) FROM kernels").fetchone() == (755, 0, 7_590_000)


FROZEN_SCHEMA2 = DATA / "frozen_warehouse_schema2"


def test_schema2_lake_gains_the_pytorch_tables_and_columns(tmp_path):
    """Migration 0005 on a frozen schema-2 lake (a Kineto and a TF run, made before it):
    new tables exist, kernels get kernel_type from their names, nothing is lost; a
    re-ingest then fills the new tables."""
    import pyarrow.parquet as pq

    from tracedb.kernel_types import classify
    from tracedb.lake import Lake

    wh = tmp_path / "wh"
    shutil.copytree(FROZEN_SCHEMA2, wh)
    # what it held, read from its Delta files with pyarrow alone
    lake = Lake(wh)
    before = {r: 0 for r in ("lstm", "torch")}
    names = []
    for r in lake.add_actions("kernels").to_pylist():
        t = pq.read_table(wh / r["path"])
        before[r["run_id"]] += t.num_rows
        names += list(zip(t.column("name").to_pylist(), t.column("kind").to_pylist()))
    with pytest.raises(TracedbError, match="0005_pytorch_depth"):
        catalog.connect(wh)
    assert catalog_migrate(wh) == ["0005_pytorch_depth", "0006_rollups", "0007_rollup_collectives",
                                 "0008_interval_rollups", *LATER]
    con = catalog.connect(wh)
    assert dict(con.execute("SELECT run_id, count(*) FROM kernels GROUP BY 1").fetchall()) == before
    assert con.execute("SELECT count(*) FROM kernels WHERE kernel_type IS NULL").fetchone()[0] == 0
    want = sorted(classify(n, k)[0] for n, k in names)
    assert sorted(r[0] for r in con.execute("SELECT kernel_type FROM kernels").fetchall()) == want
    for table in ("runtime_calls", "annotations", "steps", "events"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
    assert con.execute("SELECT count(*), count(rows_runtime_calls) FROM files").fetchone() == (2, 0)
    assert con.execute("SELECT model FROM runs WHERE run_id = 'torch'").fetchone() == ("encoder",)
    con.close()
    assert catalog_migrate(wh) == []
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="torch").ok
    con = catalog.connect(wh)
    assert con.execute("SELECT count(*) FROM runtime_calls WHERE run_id = 'torch'").fetchone()[0] > 0


FROZEN_SCHEMA3 = DATA / "frozen_warehouse_schema3"
BEFORE_ISSUE12 = DATA / "sql_before_issue12"  # past SQL: a regression check, not an oracle (its README)


# Columns whose meaning changed on purpose since the texts of before issue 12: schema 7's
# host step is the step marker's span (issue 24 item 3), checked against the raw traces
# in tests/test_step_markers.py; the rest of each row must stay as it was.
CHANGED_SINCE_ISSUE12 = {"step_times": ["host_start_ns", "host_step_ns"]}


def _rows_as_before(con, name: str, runs, variations) -> int:
    """Query `name` gives the same rows (and schema) as its text from before issue 12 for
    every run and parameter variation (a dict of values besides run_id); the rows seen."""
    from tracedb import query as q
    from tracedb import sqllib

    new, old = sqllib.load(name), sqllib.load(str(BEFORE_ISSUE12 / f"{name}.sql"))
    changed = CHANGED_SINCE_ISSUE12.get(name, [])
    seen = 0
    for run in runs:
        for extra in variations:
            values = sqllib.bind(new, {"run_id": run, **extra})
            want, got = (t.drop_columns(changed) for t in (q.execute(con, old, values), q.execute(con, new, values)))
            assert got.schema == want.schema and got.equals(want), (name, run, extra)
            seen += got.num_rows
    return seen


def test_schema3_lake_gains_rollups_that_match_the_raw_queries(tmp_path):
    """Migration 0006 on a frozen schema-3 lake (a Kineto run ingested twice, a TF run with
    three streams, a two-rank NCCL job; made with the code before it): the rollup tables
    fill for every run from its live kernels, and `gpu_busy_idle` / `stream_overlap`, which
    now read them, give the rows the raw-row queries give, for the fleet and each run and
    kind; nothing else changes; migrating again does nothing; a re-ingest replaces a run's
    rollup with the new version's."""

    wh = tmp_path / "wh"
    shutil.copytree(FROZEN_SCHEMA3, wh)
    with pytest.raises(TracedbError, match="0006_rollups"):
        catalog.connect(wh)
    assert catalog_migrate(wh) == ["0006_rollups", "0007_rollup_collectives",
                                 "0008_interval_rollups", *LATER]
    con = catalog.connect(wh)
    assert con.execute("SELECT run_id, count(*) FROM kernels GROUP BY 1 ORDER BY 1").fetchall() == [
        ("nccl", 2358), ("streams", 755), ("torch", 1202)]
    # one file per run and device in each rollup table, rows for every kind present + NULL
    assert con.execute("SELECT run_id, count(DISTINCT kind), count(*) FILTER (WHERE kind IS NULL) "
                       "FROM rollup_stream_overlap GROUP BY 1 ORDER BY 1").fetchall() == [
        ("nccl", 3, 2), ("streams", 2, 1), ("torch", 3, 1)]

    def same(con) -> int:
        return sum(_rows_as_before(con, name, (None, "nccl", "streams", "torch"),
                                   [{"kind": kind} for kind in (None, "kernel", "memcpy", "memset")])
                   for name in ("gpu_busy_idle", "stream_overlap"))

    assert same(con) > 50
    con.close()
    assert catalog_migrate(wh) == []
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="torch").ok  # torch is a TF run now
    con = catalog.connect(wh)
    assert con.execute("SELECT streams FROM rollup_stream_overlap WHERE run_id = 'torch' AND kind IS NULL").fetchall() == [(3,)]
    assert same(con) > 50


FROZEN_SCHEMA4 = DATA / "frozen_warehouse_schema4"
COLLECTIVE = re.compile(r"nccl|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all")


def _raw_collectives(*traces) -> dict:
    """(device, name) -> [instances, total_ns, overlapped_ns] from raw Kineto traces: each
    collective's time under the union of the device's other (compute) kernels."""
    import rawtrace

    out = {}
    for path in traces:
        kernels = [k for k in rawtrace.kineto(rawtrace.load_kineto_json(path)).kernels if k.kind == "kernel"]
        for device in {k.device for k in kernels}:
            mine = [k for k in kernels if k.device == device]
            compute = rawtrace.union((k.start, k.end) for k in mine if not COLLECTIVE.search(k.name.lower()))
            for k in mine:
                if COLLECTIVE.search(k.name.lower()):
                    r = out.setdefault((device, k.name), [0, 0, 0])
                    r[0] += 1
                    r[1] += k.dur
                    r[2] += rawtrace.intersect((k.start, k.end), compute)
    return out


def assert_untouched_but_by_0013(wh, before: dict[str, list[str]]) -> None:
    """The tables of `before` (their data files then) lost no file, and gained only the
    files of migration 0013 (schema 8), which rewrites every data table in files of many
    runs: no migration before it touched them."""
    for t, old in before.items():
        now = sorted(p for p in data_files(wh) if p.startswith(t + "/"))
        assert set(old) <= set(now), t
        assert all(re.search(r"/part-m0013-\d{6}-[0-9a-f]{8}\.parquet$", p) for p in set(now) - set(old)), t


def test_schema4_lake_gains_the_collectives_rollup(tmp_path):
    """Migration 0007 on a frozen schema-4 lake (made with the code before it: a Kineto run
    ingested twice, a TF run, a one-rank all-reduce and a two-rank NCCL job): every run's
    collectives rollup fills from its live kernels with the figures the raw traces give;
    `collectives`, which reads it without name_like or a step range, gives the old text's
    rows for the fleet and every run and device; the other rollups are untouched; migrating
    again does nothing; a re-ingest replaces a run's rollup."""

    wh = tmp_path / "wh"
    shutil.copytree(FROZEN_SCHEMA4, wh)
    with pytest.raises(TracedbError, match="0007_rollup_collectives"):
        catalog.connect(wh)
    before = {t: sorted(p for p in data_files(wh) if p.startswith(t + "/")) for t in ("kernels", "rollup_stream_overlap")}
    assert catalog_migrate(wh) == ["0007_rollup_collectives", "0008_interval_rollups", *LATER]
    assert_untouched_but_by_0013(wh, before)
    con = catalog.connect(wh)
    assert con.execute("SELECT run_id, count(*) FROM kernels GROUP BY 1 ORDER BY 1").fetchall() == [
        ("allreduce", 3774), ("nccl", 2358), ("streams", 755), ("torch", 399)]
    got = {(r, d, n): [i, t, o] for r, d, n, i, t, o in con.execute(
        "SELECT run_id, device, name, instances, total_ns, overlapped_ns FROM rollup_collectives").fetchall()}
    want = {("allreduce", *k): v for k, v in _raw_collectives(DATA / "hta_nccl_allreduce" / "rank-0.json.gz").items()}
    want |= {("nccl", *k): v for k, v in _raw_collectives(*sorted((DATA / "hta_nccl_two_ranks").glob("*.json.gz"))).items()}
    assert got == want
    assert len(want) == 4 and sum(i for i, _, _ in want.values()) == 41
    assert any(0 < o < t for _, t, o in want.values())  # collectives partly overlapped by compute

    def same(con) -> int:
        return _rows_as_before(con, "collectives", (None, "allreduce", "nccl", "streams", "torch"),
                               [{"device": device} for device in (None, "GPU:0", "GPU:1")])

    assert same(con) == 4 * 4  # four rows, each seen fleet-wide, in its run, on its device, both
    con.close()
    assert catalog_migrate(wh) == []
    assert ingest([DATA / "hta_nccl_allreduce"], wh, run_id="streams").ok  # streams is an all-reduce run now
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="nccl").ok  # and nccl has no collectives
    con = catalog.connect(wh)
    assert con.execute("SELECT run_id, sum(instances) FROM rollup_collectives GROUP BY 1 ORDER BY 1").fetchall() == [
        ("allreduce", 21), ("streams", 21)]
    assert same(con) == 4 * 4  # four rows again (two runs of two collectives, all on GPU:0)


FROZEN_SCHEMA5 = DATA / "frozen_warehouse_schema5"


@pytest.fixture(scope="module")
def schema5_migrated(tmp_path_factory) -> dict:
    """The frozen schema-5 lake migrated once for the module's four tests of 0008 (each
    takes its own copy, `migrated_copy`): what refused it before, its data files then,
    and what the migration applied."""
    wh = tmp_path_factory.mktemp("schema5") / "wh"
    shutil.copytree(FROZEN_SCHEMA5, wh)
    with pytest.raises(TracedbError) as refused:
        catalog.connect(wh)
    files = data_files(wh)
    return {"wh": wh, "refused": str(refused.value), "files": files, "applied": catalog_migrate(wh)}


def migrated_copy(migrated: dict, tmp_path, tables=()) -> tuple:
    """A test's own copy of a lake migrated once (its snapshot rebuilt for the new folder,
    as for any moved warehouse), and the data files of `tables` before the migration."""
    wh = tmp_path / "wh"
    shutil.copytree(migrated["wh"], wh)
    catalog.connect(wh).close()
    before = {t: sorted(p for p in migrated["files"] if p.startswith(t + "/")) for t in tables}
    return wh, before


def _raw_stream_time(run: str, *traces) -> dict:
    """(run, file, stream) -> [host wait ns, gaps, kernel wait ns, gaps, other ns, gaps,
    queue changes, min, max] from raw Kineto traces: the gaps between consecutive activities
    of a stream (by start, then end), host wait when the next one's launch call started
    after the previous one ended, else kernel wait under 30 us, else other; the queue +1 at
    each launch call, -1 at each start (a start first at the same ns)."""
    import rawtrace

    out = {}
    for path in traces:
        acts = rawtrace.kineto(rawtrace.load_kineto_json(path)).kernels
        for stream in {a.stream for a in acts}:
            mine = sorted((a for a in acts if a.stream == stream), key=lambda a: (a.start, a.end))
            r = out.setdefault((run, path.name, stream), [0] * 6 + [None] * 3)
            for prev, a in zip(mine, mine[1:]):
                gap = a.start - prev.end
                i = 0 if a.launch is not None and a.launch > prev.end else 2 if gap < 30_000 else 4
                r[i] += gap
                r[i + 1] += 1
            changes = sorted([(a.launch, 1) for a in mine if a.launch is not None]
                             + [(a.start, -1) for a in mine if a.launch is not None])
            lengths = list(itertools.accumulate(d for _, d in changes))  # the queue after each change
            if lengths:
                r[6:] = [len(lengths), min(lengths), max(lengths)]
    return out


def _raw_copies(run: str, *traces) -> dict:
    """(run, device, copy type) -> [copies, bytes, total ns] from raw Kineto traces."""
    import rawtrace

    out = {}
    for path in traces:
        for a in rawtrace.kineto(rawtrace.load_kineto_json(path)).kernels:
            if a.kind in ("memcpy", "memset") and a.bytes is not None:
                kind = "Memset" if a.kind == "memset" else f"Memcpy {a.copy_kind or 'Unknown'}"
                r = out.setdefault((run, a.device, kind), [0, 0, 0])
                r[0] += 1
                r[1] += int(a.bytes)
                r[2] += a.dur
    return out


def test_schema5_lake_gains_stream_rollup(schema5_migrated, tmp_path):
    """Migration 0008 on the frozen schema-5 lake (a Kineto run ingested twice, a TF run, a
    one-rank all-reduce and a two-rank NCCL job): every run's stream and copy rollups fill
    from its live kernels with the gaps, queue lengths and copies the raw traces give;
    `idle_time_breakdown`, `queue_length` and `memory_bandwidth`, which read them at their
    defaults, give the old texts' rows for the fleet, every run and rank, and (raw rows) a
    step range and another threshold; other tables' files are untouched; migrating again
    does nothing; a re-ingest replaces a run's rollups."""
    from tracedb import query as q
    from tracedb import sqllib

    wh, before = migrated_copy(schema5_migrated, tmp_path, ("kernels", "rollup_collectives"))
    assert "0008_interval_rollups" in schema5_migrated["refused"]
    assert schema5_migrated["applied"] == ["0008_interval_rollups", *LATER]
    assert_untouched_but_by_0013(wh, before)
    con = catalog.connect(wh)
    got = {(r, f, s): list(v) for r, f, s, *v in con.execute(
        "SELECT run_id, source_file, stream, host_wait_ns, host_wait_gaps, kernel_wait_ns, kernel_wait_gaps, "
        "other_ns, other_gaps, changes, min, max FROM rollup_stream_time WHERE run_id IN ('allreduce', 'nccl')").fetchall()}
    want = _raw_stream_time("allreduce", DATA / "hta_nccl_allreduce" / "rank-0.json.gz")
    want |= _raw_stream_time("nccl", *sorted((DATA / "hta_nccl_two_ranks").glob("*.json.gz")))
    assert got == want
    assert len(want) == 12 and sum(v[1] + v[3] + v[5] for v in want.values()) == 3774 + 2358 - 12  # activities - streams
    assert all(v[0] and v[2] and v[4] for k, v in want.items() if k[2] == 7 and k[0] == "nccl")  # all three kinds of gap
    assert con.execute("SELECT count(*), count(changes) FROM rollup_stream_time WHERE run_id = 'streams'").fetchall() == [(3, 0)]
    got = {(r, d, c): list(v) for r, d, c, *v in con.execute(
        "SELECT run_id, device, copy_type, copies, bytes, total_ns FROM rollup_memory_bandwidth "
        "WHERE run_id IN ('allreduce', 'nccl')").fetchall()}
    want = _raw_copies("allreduce", DATA / "hta_nccl_allreduce" / "rank-0.json.gz")
    want |= _raw_copies("nccl", *sorted((DATA / "hta_nccl_two_ranks").glob("*.json.gz")))
    assert got == want and len(want) == 10

    def same(con) -> int:
        seen = 0
        for name in ("idle_time_breakdown", "queue_length", "memory_bandwidth"):
            extras = [{}, {"step_to": 551}] + ([{"rank": 0}, {"rank": 1}] if sqllib.load(name).param("rank") else [])
            extras += [{"kernel_wait_ns": 30000, "rank": 1}, {"kernel_wait_ns": 5000}] if name == "idle_time_breakdown" else []
            seen += _rows_as_before(con, name, (None, "allreduce", "nccl", "streams", "torch"), extras)
        return seen

    assert same(con) > 300
    con.close()
    assert catalog_migrate(wh) == []
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="torch").ok  # torch is a TF run now
    con = catalog.connect(wh)
    assert con.execute("SELECT count(*), count(changes), count(DISTINCT source_file) FROM rollup_stream_time "
                       "WHERE run_id = 'torch'").fetchall() == [(3, 0, 1)]
    assert con.execute("SELECT copy_type, copies FROM rollup_memory_bandwidth WHERE run_id = 'torch' "
                       "ORDER BY 1").fetchall() == [("Memcpy DtoD", 7), ("Memcpy DtoH", 8), ("Memcpy HtoD", 11)]
    assert same(con) > 300
DEVICE_TIME_QUERIES = ("kernel_type_breakdown", "temporal_breakdown", "comm_comp_overlap")


def _raw_device_time(*traces) -> dict:
    """(rank, device) -> the unions `rollup_device_time` holds, from raw Kineto traces (one
    file per rank), with HTA's three buckets by name: copies, sets and memcpy/memset names
    are memory (bit 4), collective names communication (2), the rest computation (1)."""
    import rawtrace

    def bit(a) -> int:
        if a.kind != "kernel" or re.search(r"memcpy|memset", a.name.lower()):
            return 4
        return 2 if COLLECTIVE.search(a.name.lower()) else 1

    out = {}
    for path in traces:
        doc = rawtrace.load_kineto_json(path)
        acts = rawtrace.kineto(doc).kernels
        for device in {a.device for a in acts}:
            mine = [a for a in acts if a.device == device]

            def union(keep) -> int:
                return rawtrace.length(rawtrace.union((a.start, a.start + a.dur) for a in mine if keep(a)))

            row = {"span_ns": max(a.start + a.dur for a in mine) - min(a.start for a in mine),
                   "busy_ns": union(lambda a: True)}
            row |= {f"u{s}_ns": union(lambda a, s=s: bit(a) & s) for s in range(1, 8)}
            row |= {"compute_ns": union(lambda a: a.kind == "kernel" and bit(a) == 1),
                    "comm_ns": union(lambda a: a.kind == "kernel" and bit(a) == 2),
                    "compute_comm_ns": union(lambda a: a.kind == "kernel" and bit(a) < 4),
                    "comm_kernels": sum(a.kind == "kernel" and bit(a) == 2 for a in mine)}
            out[(doc["distributedInfo"]["rank"], device)] = row
    return out


def test_schema5_lake_gains_device_time_rollup(schema5_migrated, tmp_path):
    """Migration 0008 on a frozen schema-5 lake (made with the code before it: a one-rank
    all-reduce and a two-rank NCCL job, a TF run, a Kineto run ingested twice): every run's
    `rollup_device_time` fills from its live kernels with the unions the raw traces give;
    kernel_type_breakdown, temporal_breakdown and comm_comp_overlap, which read it without a
    step range, give the old texts' rows for the fleet and every run (and the raw path,
    with a step range, too); the other tables' files are untouched; migrating again does
    nothing; a re-ingest replaces a run's rollup."""
    from tracedb import query as q
    from tracedb import sqllib

    tables = ("kernels", "rollup_gpu_busy_idle", "rollup_stream_overlap", "rollup_collectives")
    wh, before = migrated_copy(schema5_migrated, tmp_path, tables)
    assert "0008_interval_rollups" in schema5_migrated["refused"]
    assert schema5_migrated["applied"] == ["0008_interval_rollups", *LATER]
    assert_untouched_but_by_0013(wh, before)
    con = catalog.connect(wh)
    assert con.execute("SELECT run_id, count(*) FROM kernels GROUP BY 1 ORDER BY 1").fetchall() == [
        ("allreduce", 3774), ("nccl", 2358), ("streams", 755), ("torch", 399)]
    # one row per run, rank and device with activity
    assert con.execute("SELECT run_id, count(*) FROM rollup_device_time GROUP BY 1 ORDER BY 1").fetchall() == [
        ("allreduce", 1), ("nccl", 2), ("streams", 1), ("torch", 1)]
    columns = [f.name for f in schema.ROLLUP_DEVICE_TIME][3:]

    def rollup(run: str) -> dict:
        rows = con.execute(f"SELECT rank, device, {', '.join(columns)} FROM rollup_device_time WHERE run_id = ?",
                           [run]).fetchall()
        return {(r[0], r[1]): dict(zip(columns, r[2:])) for r in rows}

    allreduce = _raw_device_time(DATA / "hta_nccl_allreduce" / "rank-0.json.gz")
    nccl = _raw_device_time(*sorted((DATA / "hta_nccl_two_ranks").glob("*.json.gz")))
    assert rollup("allreduce") == allreduce and rollup("nccl") == nccl
    assert sum(r["comm_kernels"] for r in nccl.values()) == 20
    # communication partly overlapped by computation on every device
    assert all(0 < r["compute_ns"] + r["comm_ns"] - r["compute_comm_ns"] < r["comm_ns"]
               for r in (*allreduce.values(), *nccl.values()))

    def same(con) -> int:
        return sum(_rows_as_before(con, name, (None, "allreduce", "nccl", "streams", "torch"),
                                   ({}, {"step_from": 551}, {"step_to": 3}))
                   for name in DEVICE_TIME_QUERIES)

    def comm_runs(con) -> list:
        cq = sqllib.load("comm_comp_overlap")
        return sorted({r["run_id"] for r in q.execute(con, cq, sqllib.bind(cq, {})).to_pylist()})

    assert same(con) > 50
    assert comm_runs(con) == ["allreduce", "nccl"]
    con.close()
    assert catalog_migrate(wh) == []
    assert ingest([DATA / "hta_nccl_allreduce"], wh, run_id="streams").ok  # streams is an all-reduce run now
    con = catalog.connect(wh)
    assert rollup("streams") == allreduce
    assert same(con) > 50
    assert comm_runs(con) == ["allreduce", "nccl", "streams"]


def test_schema5_lake_gains_the_step_rollup(schema5_migrated, tmp_path):
    """Migration 0008 on the frozen schema-5 lake (the schema-4 one migrated by 0007): every
    run's `rollup_step_times` fills from its live nodes and kernels (and
    `rollup_kernel_launch_config` from its kernels) with the figures the raw TF trace
    gives; `step_times` and `kernel_launch_config`, which read them, give the old text's
    rows for the fleet and every run (and device); other tables are untouched; migrating
    again does nothing; a re-ingest replaces a run's rollups."""
    import rawtrace

    # (nodes: 0009 adds columns to them)
    wh, before = migrated_copy(schema5_migrated, tmp_path, ("kernels", "rollup_collectives", "rollup_stream_overlap"))
    assert "0008_interval_rollups" in schema5_migrated["refused"]
    assert schema5_migrated["applied"] == ["0008_interval_rollups", *LATER]
    assert_untouched_but_by_0013(wh, before)
    con = catalog.connect(wh)
    assert con.execute("SELECT list(DISTINCT run_id ORDER BY run_id), list(DISTINCT device) FROM rollup_step_times"
                       ).fetchall() == [(["allreduce", "nccl", "streams", "torch"], ["all"])]
    # the TF run, one step (0), from the raw StepStats: host ops and GPU activity
    tf = rawtrace.tf()
    spans = [(a.start, a.end) for a in tf.nodes + tf.kernels]
    kernels = [k for k in tf.kernels if k.kind == "kernel"]
    assert con.execute("SELECT step, wall_ns, host_step_ns, device_busy_ns, gpu_kernel_ns, nodes, kernels "
                       "FROM rollup_step_times WHERE run_id = 'streams'").fetchall() == [(
        0, max(e for _, e in spans) - min(b for b, _ in spans),
        max(n.end for n in tf.nodes) - min(n.start for n in tf.nodes),
        rawtrace.length(rawtrace.union((k.start, k.end) for k in tf.kernels)),
        sum(k.dur for k in kernels), len(tf.nodes), len(kernels))]
    assert (len(tf.nodes), len(kernels)) == (577, 729)  # the files table: 577 nodes, 755 kernels rows (26 copies)
    want = {}
    for k in kernels:
        w = want.setdefault((k.device, k.name), [0, 0])
        w[0], w[1] = w[0] + 1, w[1] + k.dur
    assert {(d, n): [i, t] for d, n, i, t in con.execute(
        "SELECT device, name, instances, total_ns FROM rollup_kernel_launch_config WHERE run_id = 'streams'"
    ).fetchall()} == want

    def same(con) -> int:
        return sum(_rows_as_before(con, name, (None, "allreduce", "nccl", "streams", "torch"), variations)
                   for name, variations in (("step_times", [{}]), ("kernel_launch_config",
                                            [{}, {"device": "GPU:0"}, {"device": "GPU:1", "limit": 3}])))

    seen = same(con)
    assert seen > 100
    con.close()
    assert catalog_migrate(wh) == []
    assert ingest([scenario("tf_runmetadata_text")], wh, run_id="streams").ok  # streams: host ops only now
    con = catalog.connect(wh)
    assert con.execute("SELECT step, kernels, device_busy_ns FROM rollup_step_times WHERE run_id = 'streams'"
                       ).fetchall() == [(0, 0, None)]
    assert con.execute("SELECT count(*) FROM rollup_kernel_launch_config WHERE run_id = 'streams'").fetchall() == [(0,)]
    assert same(con) > 50


def test_schema5_lake_gains_the_launch_rollup(schema5_migrated, tmp_path):
    """Migration 0008 on the frozen schema-5 lake fills `rollup_kernel_launches`: one row
    per activity the raw Kineto traces give a launch call (by correlation id), and
    `kernel_launch_stats`, which reads only it, gives the old text's rows for the fleet,
    every run, a rank, a step range and other cutoffs."""
    import rawtrace

    wh, _ = migrated_copy(schema5_migrated, tmp_path)
    assert schema5_migrated["applied"] == ["0008_interval_rollups", *LATER]
    con = catalog.connect(wh)
    launched = {run: sum(1 for p in paths for k in rawtrace.kineto(rawtrace.load_kineto_json(p)).kernels
                         if k.launch is not None)
                for run, paths in (("allreduce", [DATA / "hta_nccl_allreduce" / "rank-0.json.gz"]),
                                   ("nccl", sorted((DATA / "hta_nccl_two_ranks").glob("*.json.gz"))))}
    got = dict(con.execute("SELECT run_id, count(*) FROM rollup_kernel_launches GROUP BY 1").fetchall())
    assert {r: got[r] for r in launched} == launched == {"allreduce": 3774, "nccl": 2358}
    assert "streams" not in got  # a TF run records no launch calls
    seen = _rows_as_before(con, "kernel_launch_stats", (None, "allreduce", "nccl", "streams", "torch"),
                           ({}, {"rank": 1}, {"step_from": 552, "step_to": 553},
                            {"runtime_cutoff_ns": 3000, "launch_delay_cutoff_ns": 0}))
    assert seen > 2 * (3774 + 2358)
    con.close()
    assert catalog_migrate(wh) == []


FROZEN_SCHEMA6 = DATA / "frozen_warehouse_schema6"


def _views(wh) -> dict[str, list]:
    con = catalog.connect(wh)
    try:
        return {t: con.execute(f"SELECT * EXCLUDE (source_file) FROM {t} ORDER BY ALL").fetchall()
                if "source_file" in schema.TABLES[t].names else con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in schema.TABLES}
    finally:
        con.close()


@pytest.fixture(scope="module")
def schema6_clean_views(tmp_path_factory) -> dict[str, list]:
    """The views of the frozen schema-6 lake after a migration that was never killed (made
    once: both kill points compare with it)."""
    clean = tmp_path_factory.mktemp("schema6") / "clean"
    shutil.copytree(FROZEN_SCHEMA6, clean)
    catalog_migrate(clean)
    return _views(clean)


@pytest.mark.parametrize("step", ["m0013_before_unpartition", "m0013_after_unpartition"])
def test_layout_migration_killed_at_its_commits_is_completed_by_a_rerun(schema6_clean_views, tmp_path, step):
    """Migration 0013 (schema 8) on a frozen schema-6 lake, SIGKILLed before and after the
    commit that unpartitions its first table: a rerun ends with the rows a migration
    that was never killed gives, every table unpartitioned, no record left."""
    import subprocess
    import sys

    from tracedb.lake import Lake

    killed = tmp_path / "killed"
    shutil.copytree(FROZEN_SCHEMA6, killed)
    want = schema6_clean_views
    assert sum(len(rows) for rows in want.values()) > 10_000
    r = subprocess.run([sys.executable, "-m", "tracedb.cli", "migrate", "-w", str(killed)], capture_output=True,
                       env={**__import__("os").environ, "TRACEDB_CRASH_AT": step})
    assert r.returncode == -9, r.stderr
    assert any((killed / "_tracedb").glob("m0013-*.json"))  # the first table's new files, on record
    catalog_migrate(killed)
    assert _views(killed) == want
    assert not list((killed / "_tracedb").glob("m0013-*.json"))
    lake = Lake(killed)
    assert lake.partitioned_tables() == frozenset()
    for table in ("nodes", "kernels"):  # every live row is in a new file of many runs
        assert all("/part-m0013-" in p for p in lake.live_files(table)[0])


NEW_IN_0015 = ["rollup_kernel_names", "rollup_kernel_histogram", "rollup_op_summary", "rollup_nccl_bandwidth",
               "rollup_memcpy_summary", "rollup_run_summary", "rollup_step_flops"]


@pytest.mark.parametrize("variant", ["default", "groups of 500 rows", "a file out of run order"])
def test_schema6_lake_gains_the_fleet_rollups(tmp_path, monkeypatch, variant):
    """Migration 0015 (schema 10) on the frozen schema-6 lake (Kineto, NCCL two-rank, TF,
    MegEngine and JAX runs): every run's new rollups hold the figures counted here in
    Python from its raw rows (durations bucketed by their bit length, not by log2), and the
    canned queries that read them give the rows their raw-row SQL gives. With groups of at
    most 500 rows, every run but the smallest is computed alone from its files (a run too
    big to hold); with a file found out of run order, the runs are computed a group at a
    time from their files (`rollups.backfill`): the same figures."""
    from collections import Counter, defaultdict

    from tracedb import lake as lake_mod
    from tracedb import rollups, sqllib
    from tracedb.lake import Lake
    from tracedb.output import plain_numbers

    if variant == "groups of 500 rows":
        monkeypatch.setattr(rollups, "GROUP_ROWS", 500)
    elif variant == "a file out of run order":
        def refuse(self, *args):
            raise lake_mod.NotInRunOrder(self.path)
            yield  # a generator, as the cursor's pieces are

        monkeypatch.setattr(lake_mod._RunCursor, "_pieces", refuse, raising=False)
    wh = tmp_path / "s6"
    shutil.copytree(FROZEN_SCHEMA6, wh)
    assert "0015_fleet_rollups" in catalog_migrate(wh)
    con = catalog.connect(wh)
    try:
        runs = sorted(r for (r,) in con.execute("SELECT run_id FROM runs").fetchall())
        assert len(runs) == 5
        lake = Lake(wh)  # the five runs' rows of each table in one file (one group), not a file a run
        assert {t: len(lake.live_files(t)[0]) for t in NEW_IN_0015} == {
            t: 0 if t == "rollup_nccl_bandwidth" else 1 for t in NEW_IN_0015}
        kernels = con.execute("SELECT run_id, device, kind, name, copy_kind, duration_ns, bytes FROM kernels").fetchall()
        nodes = con.execute("SELECT run_id, device, node_name, op_type, duration_ns, flops, flops_counted FROM nodes").fetchall()

        # rollup_run_summary: a row per run with its kernel and node counts and kernel time
        want = {r: (sum(1 for k in kernels if k[0] == r and k[2] == "kernel"),
                    sum(1 for n in nodes if n[0] == r),
                    sum(k[5] for k in kernels if k[0] == r and k[2] == "kernel")) for r in runs}
        got = {r: (k, n, ns) for r, k, n, ns in con.execute(
            "SELECT run_id, kernels, nodes, gpu_kernel_ns FROM rollup_run_summary").fetchall()}
        assert got == want and want["kineto"][0] > 1000

        # rollup_kernel_names: instances, total, min, max per run, device, kind and name
        groups = defaultdict(list)
        for run, dev, kind, name, _, dur, _ in kernels:
            groups[(run, dev, kind, name)].append(dur)
        want = {key: (len(d), sum(d), min(d), max(d)) for key, d in groups.items()}
        got = {(r, d, k, n): (i, t, lo, hi) for r, d, k, n, i, t, lo, hi in con.execute(
            "SELECT run_id, device, activity_kind, name, instances, total_ns, min_ns, max_ns FROM rollup_kernel_names").fetchall()}
        assert got == want and len({key[0] for key in want}) == 5

        # rollup_kernel_histogram: [2^k, 2^(k+1)) by the duration's bit length
        count, total = Counter(), Counter()
        for run, dev, kind, _, _, dur, _ in kernels:
            if dur is not None:
                key = (run, dev, kind, 0 if dur < 1 else 1 << (dur.bit_length() - 1))
                count[key] += 1
                total[key] += dur
        got = {(r, d, k, b): (i, t) for r, d, k, b, i, t in con.execute(
            "SELECT run_id, device, activity_kind, bucket_lo_ns, instances, total_ns FROM rollup_kernel_histogram").fetchall()}
        assert got == {key: (count[key], total[key]) for key in count}

        # rollup_memcpy_summary: copies and sets per direction, their bytes
        ops, byts = Counter(), Counter()
        for run, dev, kind, _, copy_kind, _, b in kernels:
            if kind in ("memcpy", "memset"):
                ops[(run, dev, kind, copy_kind)] += 1
                byts[(run, dev, kind, copy_kind)] += b or 0
        got = {(r, d, k, c): (o, b or 0) for r, d, k, c, o, b in con.execute(
            "SELECT run_id, device, activity_kind, copy_kind, operations, total_bytes FROM rollup_memcpy_summary").fetchall()}
        assert got == {key: (ops[key], byts[key]) for key in ops} and ops

        # rollup_op_summary: timed executions per run, device, op name and type
        groups = defaultdict(list)
        for run, dev, name, op_type, dur, _, _ in nodes:
            if dur is not None:
                groups[(run, dev, name, op_type)].append(dur)
        got = {(r, d, n, o): (e, t) for r, d, n, o, e, t in con.execute(
            "SELECT run_id, device, node_name, op_type, executions, total_ns FROM rollup_op_summary").fetchall()}
        assert got == {key: (len(d), sum(d)) for key, d in groups.items()}

        # rollup_step_flops: each run's FLOPs, each op counted once
        want = Counter()
        for run, _, _, _, _, flops, counted in nodes:
            if flops is not None and counted is not False:
                want[run] += flops
        got = dict(con.execute("SELECT run_id, sum(flops) FROM rollup_step_flops GROUP BY 1").fetchall())
        assert got == dict(want) and sum(want.values()) > 0

        # the canned queries read them, and give what their raw-row SQL gives
        for name in ("fleet_trend", "kernel_summary", "top_ops", "kernel_duration_histogram", "nccl_bandwidth",
                     "memcpy_summary", "mfu"):
            cq = sqllib.load(name)
            values = sqllib.bind(cq, {"limit": 100_000} if cq.param("limit") else {})
            fast, raw = cq.sql_for(values), cq.sql_for(values, rollups=False)
            assert "rollup_" in fast and "rollup_" not in raw, name

            def rows(sql):
                names = sqllib.bound_names(sql, con)
                return plain_numbers(con.sql(sql, params={k: v for k, v in values.items() if k in names} or None)
                                     .to_arrow_table()).to_pylist()
            assert rows(fast) == rows(raw), name
    finally:
        con.close()


def test_fleet_rollups_read_each_source_file_once(tmp_path, monkeypatch):
    """Migration 0015 reads each live file of the tables its metrics read (kernels, nodes,
    steps) once, whatever the runs it holds: the files are merged by run (each in run
    order), not read again for each group of runs (or each run) whose rows it holds. The
    frozen schema-6 lake's five runs share one file a table once migrated to schema 9."""
    from tracedb import migrate as migrate_mod
    from tracedb import rollups, storage
    from tracedb.lake import Lake

    wh = tmp_path / "s6"
    shutil.copytree(FROZEN_SCHEMA6, wh)
    every = migrate_mod.discover()
    with monkeypatch.context() as m:  # up to schema 9 first: migration 0014
        m.setattr(migrate_mod, "discover", lambda: [g for g in every if g.number < 15])
        catalog_migrate(wh)
    lake = Lake(wh)
    sources = {t: lake.live_files(t)[0] for t in ("kernels", "nodes", "steps")}
    assert all(len(files) == 1 for files in sources.values())
    assert len(lake.live_files_by_run("kernels")[0]) == 5  # the five runs' kernels share the file

    reads: list[str] = []  # every read of a lake file: pyarrow's, and a relation DuckDB reads
    parquet_source, run_rows = storage.LocalStorage.parquet_source, rollups._run_rows

    def read(self, rel):
        reads.append(rel)
        return parquet_source(self, rel)

    def relation(paths, *args):
        reads.extend(str(p) for p in paths)
        return run_rows(paths, *args)

    monkeypatch.setattr(storage.LocalStorage, "parquet_source", read)
    monkeypatch.setattr(rollups, "_run_rows", relation)
    assert catalog_migrate(wh) == ["0015_fleet_rollups"]
    counts = {rel: sum(1 for r in reads if r.endswith(rel)) for files in sources.values() for rel in files}
    assert counts == {rel: 1 for rel in counts}
