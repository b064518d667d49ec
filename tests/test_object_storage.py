"""A warehouse on object storage: the whole flow on a loopback S3 server (moto's server
mode, started here on 127.0.0.1), compared with the same traces in a local warehouse.

Several `tracedb ingest` processes write one lake at once (the README's distributed
ingest recipe): different runs, two writers on the same run, and one writer killed
after its data commit while it holds the commit lease.
"""

from __future__ import annotations

import json
import re
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tracedb
from tracedb import catalog, lake, snapshot, storage
from tracedb import query as q
from tracedb import sqllib
from tracedb.cli import app
from tracedb.errors import TracedbError, WarehouseError

from conftest import DATA, scenario

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "tracedb-test"
runner = CliRunner()


@pytest.fixture(scope="module")
def s3(moto_server, tmp_path_factory):
    """The AWS variables pointing at moto's S3 server (the session's), one bucket."""
    endpoint = moto_server
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": endpoint, "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
           "TRACEDB_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_S3_LOCKING_PROVIDER", "TRACEDB_WAREHOUSE"):
            mp.delenv(k, raising=False)
        fs = storage.ObjectStorage(f"s3://{BUCKET}").fs
        if not fs.exists(BUCKET):  # made by the first module of the session that uses it
            fs.call_s3("create_bucket", Bucket=BUCKET)
        yield env


# -- the location of a warehouse -----------------------------------------------------------

def test_a_url_warehouse_stays_a_url(tmp_path):
    assert tracedb.Warehouse("s3://bucket/wh/").path == "s3://bucket/wh"
    assert tracedb.Warehouse("gs://bucket/a/b").path == "gs://bucket/a/b"
    assert tracedb.Warehouse(f"file://{tmp_path}/wh").path == tmp_path / "wh"
    assert tracedb.Warehouse("wh").path == Path("wh")
    assert tracedb.Warehouse(tmp_path).path == tmp_path


def test_a_missing_bucket_is_a_one_line_error(s3, tmp_path):
    r = runner.invoke(app, ["runs", "-w", "s3://no-such-bucket/wh"])
    assert r.exit_code == 2 and "no warehouse at s3://no-such-bucket/wh" in r.output
    r = runner.invoke(app, ["ingest", str(scenario("node_shape_dump")), "-w", "s3://no-such-bucket/wh"])
    last = r.output.strip().splitlines()[-1]  # after the plan ("found 1 run(s)...")
    assert r.exit_code == 2 and last == ("tracedb: error: warehouse error: cannot take the commit lease "
                                         "s3://no-such-bucket/wh/_tracedb/commit.lock: The specified bucket does not exist")
    assert not (tmp_path / "s3:").exists() and not Path("s3:").exists()


# -- the commit lease ------------------------------------------------------------------------

def test_lease_excludes_other_writers_until_released(s3):
    st = storage.ObjectStorage(f"s3://{BUCKET}/lease1")
    with st.lock("_tracedb/commit.lock") as held:
        assert held
        other = storage.ObjectStorage(f"s3://{BUCKET}/lease1")
        with other.lock("_tracedb/commit.lock", wait=False) as held2:
            assert held2 is False
    assert not st.is_file("_tracedb/commit.lock")  # released: deleted
    with other.lock("_tracedb/commit.lock", wait=False) as held3:
        assert held3


def test_a_dead_writers_lease_is_taken_over_by_exactly_one(s3, monkeypatch):
    monkeypatch.setenv("TRACEDB_LOCK_LEASE_SECONDS", "1")
    st = storage.ObjectStorage(f"s3://{BUCKET}/lease2")
    dead = storage.Lease(st, "_tracedb/commit.lock")
    assert dead.acquire()
    dead._stop.set()  # it stops renewing, as a killed process would
    dead._thread.join()
    time.sleep(1.2)
    assert not dead.valid()
    winners = []
    contenders = [storage.Lease(st, "_tracedb/commit.lock") for _ in range(4)]
    threads = [threading.Thread(target=lambda c=c: winners.append(c) if c.acquire(wait=False) else None)
               for c in contenders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    owner = json.loads(st.read_bytes("_tracedb/commit.lock"))["owner"]
    assert owner == winners[0].owner
    dead.release()  # its conditional delete does not touch the new holder's lease
    assert json.loads(st.read_bytes("_tracedb/commit.lock"))["owner"] == winners[0].owner
    winners[0].release()
    assert not st.is_file("_tracedb/commit.lock")


def test_a_live_writers_lease_is_renewed(s3, monkeypatch):
    monkeypatch.setenv("TRACEDB_LOCK_LEASE_SECONDS", "2")
    st = storage.ObjectStorage(f"s3://{BUCKET}/lease3")
    holder = storage.Lease(st, "_tracedb/commit.lock")
    assert holder.acquire()
    first = json.loads(st.read_bytes("_tracedb/commit.lock"))["expires"]
    time.sleep(4)  # twice the lease: only renewals keep it
    assert holder.valid()
    assert json.loads(st.read_bytes("_tracedb/commit.lock"))["expires"] > first + 1
    assert not storage.Lease(st, "_tracedb/commit.lock").acquire(wait=False)
    holder.release()
    assert not st.is_file("_tracedb/commit.lock")


def test_a_lease_holder_updates_each_handle_once_and_after_its_own_commits(s3, monkeypatch):
    """On object storage a handle's update is a LIST and a GET: under the lease (no other
    writer can commit) a handle opened or updated is used as it is until this lake commits
    to its table; without the lease, or once the lease is no longer valid, every use
    updates it. The versions are the log's own, read by a new DeltaTable each time."""
    from deltalake import DeltaTable

    url = f"s3://{BUCKET}/handles"
    lk = catalog.open_lake(url, create=True)
    other = catalog.open_lake(url)

    def log_version(table: str) -> int:
        return DeltaTable(lk.uri(table), storage_options=lk._opts).version()

    updates = []
    real = DeltaTable.update_incremental

    def counted(dt, *args, **kwargs):
        updates.append(1)
        return real(dt, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    row = {"acceptance_id": "a1", "action": "accept", "run_id": "r1", "metrics": [], "note": "n", "accepted_by": "t",
           "accepted_at": None}
    lk.table("acceptances")  # opened before the lease: brought up to date under it
    with other.lock():
        other.append_acceptance(row)  # version 1, a commit this lake has not seen
    assert log_version("acceptances") == 1
    with lk.lock():
        updates.clear()
        assert lk.table("acceptances").version() == 1 and len(updates) == 1  # the first use under the lease
        for _ in range(3):
            assert lk.table("acceptances").version() == 1
        assert len(updates) == 1  # then none
        lk.append_acceptance({**row, "acceptance_id": "a2"})
        assert lk.table("acceptances").version() == log_version("acceptances") == 2 and len(updates) == 2
        lk.table("acceptances")
        assert len(updates) == 2
        monkeypatch.setattr(lk.storage, "lock_valid", lambda: False)  # the lease ran out: update again
        lk.table("acceptances")
        lk.table("acceptances")
        assert len(updates) == 4
        monkeypatch.undo()
        monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    with other.lock():
        other.append_acceptance({**row, "acceptance_id": "a3"})
    updates.clear()
    assert lk.table("acceptances").version() == log_version("acceptances") == 3  # no lease: every use updates
    lk.table("acceptances")
    assert len(updates) == 2
    with lk.lock():
        lk.table("acceptances")
        lk.table("acceptances")
    assert len(updates) == 3  # a new lease: once more


def test_a_writer_that_lost_its_lease_does_not_publish(s3):
    lk = catalog.open_lake(f"s3://{BUCKET}/lost", create=True)
    with lk.lock():
        lk.storage._lease.lost = True  # taken over while this writer stalled
        commit = lake.RunCommit({"run_id": "r1"}, [], [], replace=True, ingest_id="20260101T000000-000000")
        with pytest.raises(WarehouseError, match="lost the commit lease"):
            lk.commit([commit])
    assert lk.published() == {}


def test_a_connection_asks_what_a_data_file_is_once(s3):
    """DuckDB asks a file's size, modified time and ETag each time a query opens it (a HEAD
    request each); a data file never changes, so one connection asks once per file."""
    url = f"s3://{BUCKET}/heads"
    wh = tracedb.Warehouse(url)
    assert wh.ingest(scenario("tf_stepstats_gpu_streams"), run_id="r").ok
    con = wh.connect()
    client = catalog.open_lake(url).storage.fs._s3  # fsspec's one filesystem for these options
    heads = []
    client.meta.events.register("before-parameter-build.s3.HeadObject", lambda params, **_: heads.append(params["Key"]))
    for _ in range(3):
        assert con.execute("SELECT count(*) FROM kernels").fetchall() == [(755,)]
        assert con.execute("SELECT count(*) FROM nodes WHERE run_id = 'r'").fetchall() == [(577,)]
    files = [k for k in heads if k.endswith(".parquet")]
    assert files and sorted(files) == sorted(set(files)), heads
    con.close()


# -- the whole flow, compared with a local lake --------------------------------------------

LEASE_SECONDS = 8  # the killed writer's lease: the others wait this long, then take it over
DAYS = ["day1", "day2", "day3"]


def _sources(tmp: Path) -> dict[str, list[str]]:
    """Each writer's runs folder: its own runs; `day4_again` is a second writer on day4;
    `crashed` is killed after its data commit, holding the lease."""
    fleet = DATA / "fleet_dev"
    batches = {"batch_a": ["day1", "day2", "day3"], "batch_b": ["day4", "mem512", "slow_extra2"],
               "day4_again": ["day4"]}
    out = {}
    for name, runs in batches.items():
        for run in runs:
            shutil.copytree(fleet / run, tmp / name / run)
        out[name] = [str(tmp / name)]
    # `tf`: two runs of other formats in one writer; started_at labels: queries that order
    # runs in time see the same order in both lakes
    for day, name in enumerate(("tf_runmetadata_text", "tf_stepstats_gpu_streams", "crashed"), start=20):
        src = scenario("node_shape_dump" if name == "crashed" else name)
        writer = "crashed" if name == "crashed" else "tf"
        (tmp / writer / name).mkdir(parents=True)
        shutil.copy(src, tmp / writer / name / src.name)
        (tmp / writer / name / "run.json").write_text(json.dumps({"model": "tf", "started_at": f"2026-11-{day}T00:00:00Z"}))
        out[writer] = [str(tmp / writer)]
    return out


def _cli(args: list[str], env: dict, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tracedb.cli", *args], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows_per_run(wh: tracedb.Warehouse) -> dict:
    """(table, run) -> rows, in one query (a connection on S3 checks the snapshot's freshness
    with LIST requests)."""
    sql = " UNION ALL ".join(f"SELECT '{t}' AS t, run_id, count(*) AS n FROM {t} GROUP BY run_id"
                             for t in ("nodes", "kernels", "tensors", "allocations", "files"))
    return {(r["t"], r["run_id"]): r["n"] for r in wh.sql(sql).to_pylist()}


def _plain(v):
    if isinstance(v, float):
        return round(v, 6) if math.isfinite(v) else v
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _query_rows(con, cq, params: dict) -> list[tuple]:
    t = q.execute(con, cq, sqllib.bind(cq, params))
    # ingested_at is when each lake got the run: the only column that differs by design
    cols = [c for c in t.column_names if c != "ingested_at"]
    return [tuple(_plain(r[c]) for c in cols) for r in t.to_pylist()]


def _without_ingested_at(doc):
    if isinstance(doc, dict):
        return {k: _without_ingested_at(v) for k, v in doc.items() if k != "ingested_at"}
    if isinstance(doc, list):
        return [_without_ingested_at(v) for v in doc]
    return doc


def _parquet_objects(st: storage.ObjectStorage, table: str) -> set[str]:
    return {p for p in st.files_under(table) if p.endswith(".parquet")}


@pytest.mark.slow
def test_whole_flow_on_s3_with_concurrent_writers_equals_a_local_lake(s3, fleet_warehouse, tmp_path, monkeypatch):
    url = f"s3://{BUCKET}/wh"
    srcs = _sources(tmp_path)
    # Every writer at once, each a separate `tracedb ingest` process.
    env = {**s3, "TRACEDB_LOCK_LEASE_SECONDS": str(LEASE_SECONDS)}
    procs = {}
    for name, args in srcs.items():
        extra = {"TRACEDB_CRASH_AT": "ingest_after_add"} if name == "crashed" else {}
        jobs = "2" if name == "batch_b" else "1"  # batch_b's files are read by worker processes
        procs[name] = _cli(["ingest", *args, "--warehouse", url, "--jobs", jobs], {**env, **extra}, tmp_path)
    # the local lake, the reference, meanwhile (the writers wait on the lease and the S3 server):
    # the session's fleet_dev lake (the six runs of batch_a and batch_b), copied, and `tf`
    shutil.copytree(fleet_warehouse, tmp_path / "local")
    local = tracedb.Warehouse(tmp_path / "local")
    assert local.ingest(*srcs["tf"]).ok
    assert sorted(local.runs().column("run_id").to_pylist()) == sorted(
        p.name for name in ("batch_a", "batch_b", "tf") for p in Path(srcs[name][0]).iterdir())
    for name, p in procs.items():
        out, err = p.communicate(timeout=600)
        if name == "crashed":
            assert p.returncode == -9, err
        else:
            assert p.returncode == 0, f"{name}: {err}"
    assert not (tmp_path / "s3:").exists()  # the URL was not taken for a local folder

    remote = tracedb.Warehouse(url)
    lk = catalog.open_lake(url)
    # every run landed once; the killed writer's run did not
    assert sorted(remote.runs().column("run_id").to_pylist()) == sorted(local.runs().column("run_id").to_pylist())
    assert "crashed" not in lk.published() and len(lk.published()) == 8
    want = _rows_per_run(local)
    assert _rows_per_run(remote) == want
    assert want[("kernels", "day4")] == 744 and want[("kernels", "slow_extra2")] == 854
    # two writers ingested day4: both are in the log, one complete version is live
    log = remote.sql("SELECT count(DISTINCT ingest_id) AS n FROM ingest_log WHERE run_id = 'day4'").to_pylist()
    assert log == [{"n": 2}]
    # Files hold many runs (schema 8) and a re-ingest rewrites none, so the loser's day4 rows
    # may stay in batch_b's file beside its live mem512 and slow_extra2 (the views filter
    # them): which writer commits last is a race. Whichever did, every file whose run range
    # holds day4 holds a row of a published run's live ingest (by its run and ingest
    # ranges): day4_again's file, had it lost, left the log; the winner's is there.
    published = lk.published()
    for table in ("nodes", "kernels", "allocations"):  # day4 has no tensors
        day4 = [a for a in lk.add_actions(table).to_pylist() if a["run_id"] <= "day4" <= a["run_hi"]]
        assert any(a["min_ingest"] <= published["day4"] <= a["max_ingest"] for a in day4), table
        for a in day4:
            assert any(a["run_id"] <= run <= a["run_hi"] and a["min_ingest"] <= ing <= a["max_ingest"]
                       for run, ing in published.items()), (table, a, published)

    # every canned query: the same rows as the local lake (one sandboxed connection each,
    # as `tracedb query` opens)
    nonempty = 0
    con_remote, con_local = q.sandbox(remote.connect(), url), q.sandbox(local.connect(), local.path)
    for cq in sqllib.list_queries():
        runs = iter(["day3", "day4"])
        params = {p.name: next(runs) for p in cq.params if p.required}
        # and one run: the query then reads views over that run's objects alone (`-- scope:`)
        for values in [params] + ([{**params, "run_id": "day4"}] if cq.param("run_id") else []):
            got, expected = _query_rows(con_remote, cq, values), _query_rows(con_local, cq, values)
            assert got == expected, (cq.name, values)
            nonempty += bool(expected)
    assert nonempty >= 40
    made = snapshot.scope_to_runs(con_remote, ["day4"], "SELECT * FROM kernels")  # the remote snapshot lists each run's objects
    assert "kernels" in made
    [(sql,)] = con_remote.execute("SELECT sql FROM duckdb_views() WHERE temporary AND view_name = 'kernels'").fetchall()
    every = con_remote.execute("SELECT path, run_lo, run_hi FROM tracedb_live_files WHERE table_name = 'kernels'").fetchall()
    scoped = re.findall(r"'([^']+\.parquet)'", sql)
    # the objects whose run range holds day4, every one of them, and no other
    assert scoped and all(p.startswith(f"{url}/kernels/part-") for p in scoped)
    assert sorted(scoped) == sorted(p for p, lo, hi in every if lo <= "day4" <= hi) and len(scoped) < len(every)
    snapshot.unscope(con_remote, made)
    con_remote.close()
    con_local.close()

    # the sandbox: the warehouse's prefix only, not a sibling prefix or another bucket's file
    for other in (f"s3://{BUCKET}/wh2/x.parquet", f"s3://{BUCKET}/lost/_tracedb/lake.json", "/etc/passwd"):
        with pytest.raises(TracedbError, match="sandbox refused"):
            remote.sql(f"SELECT * FROM read_text('{other}')")

    # report and export: the same as local
    args = ["report", *sum((["-b", d] for d in DAYS), []), "-c", "mem512", "-f", "json"]
    r_local = runner.invoke(app, [*args, "-w", str(local.path)])
    r_remote = runner.invoke(app, [*args, "-w", url])
    assert r_remote.exit_code == r_local.exit_code == 1  # mem512's memory regression
    doc = _without_ingested_at(json.loads(r_remote.stdout))
    assert doc == _without_ingested_at(json.loads(r_local.stdout))
    assert doc["verdict"] == "regression" and len(doc["baseline_runs"]) == 3
    n_local = local.export_chrome("day1", tmp_path / "local.json")
    n_remote = remote.export_chrome("day1", tmp_path / "remote.json")
    assert n_remote == n_local > 0
    assert json.loads((tmp_path / "remote.json").read_text()) == json.loads((tmp_path / "local.json").read_text())
    assert remote.check() == []

    # the snapshot is in the lake too, for DuckDB clients that read S3 themselves
    st = lk.storage
    snap = tmp_path / "from_lake.duckdb"
    snap.write_bytes(st.read_bytes(catalog.CATALOG))
    import duckdb

    con = duckdb.connect()
    con.register_filesystem(st.fs)
    con.execute(f"ATTACH '{snap}' AS lakesnap (READ_ONLY)")
    assert con.execute("SELECT count(*) FROM lakesnap.kernels").fetchone()[0] == sum(
        n for (t, _), n in want.items() if t == "kernels")
    con.close()

    # rm, then vacuum: the superseded day4 files, the removed run's and the killed writer's go
    assert runner.invoke(app, ["rm", "slow_extra2", "-w", url]).exit_code == 0
    local.rm("slow_extra2")
    assert _rows_per_run(remote) == _rows_per_run(local)
    live = {t: set(lk.live_files(t)[0]) for t in ("nodes", "kernels")}
    # dead files still there: the killed writer's nodes always (it read a node dump); a
    # kernels file only if batch_b's day4 committed last (day4_again's file then holds no
    # live row), which is a race
    assert _parquet_objects(st, "nodes") > live["nodes"] and _parquet_objects(st, "kernels") >= live["kernels"]
    assert runner.invoke(app, ["vacuum", "--retention-hours", "0", "-w", url]).exit_code == 0
    for t in ("nodes", "kernels"):
        assert _parquet_objects(st, t) == live[t]
        assert not any("run_id=crashed" in p or "run_id=slow_extra2" in p for p in _parquet_objects(st, t))
    assert _rows_per_run(remote) == _rows_per_run(local)
    assert sorted(remote.runs().column("run_id").to_pylist()) == sorted(local.runs().column("run_id").to_pylist())
    assert runner.invoke(app, ["optimize", "-w", url]).exit_code == 0
    assert remote.check() == [] and _rows_per_run(remote) == _rows_per_run(local)

    # a new reader (empty cache) takes the lake's own snapshot: it needs no lease, so it
    # neither waits for a writer holding one nor needs write permission
    monkeypatch.setenv("TRACEDB_CACHE_DIR", str(tmp_path / "new_reader_cache"))
    busy = storage.Lease(st, lake.LOCK_FILE)
    assert busy.acquire(wait=False)
    try:
        counts = []
        reader = threading.Thread(target=lambda: counts.append(_rows_per_run(tracedb.Warehouse(url))))
        reader.start()
        reader.join(timeout=120)
        assert counts == [_rows_per_run(local)]
    finally:
        busy.release()

    # check reads the objects: a damaged one is named
    victim = sorted(lk.live_files("kernels")[0])[0]
    st.write_atomic(victim, b"not parquet")
    assert [(p, why.split(",")[0]) for _, p, why in remote.check()] == [(victim, "size 11 B")]
