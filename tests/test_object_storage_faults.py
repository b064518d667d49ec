"""Object storage (issue 28): a writer paused past its lease stops every later step, the
maintenance commands stop once their lease is lost, and a reader with no cache never
waits for a stalled writer nor writes to the bucket.

On moto's S3 server on loopback (the `s3` fixture of tests/test_object_storage.py). A
paused writer is a `tracedb ingest` process stopped by the fault hook
(TRACEDB_STOP_AT=<point>: SIGSTOP, whose lease renewals stop with it, as a paused VM's
would), resumed with SIGCONT. Row counts are those of tests/test_lake.py's two versions
of a run, read from the raw traces (node dump: 178 nodes; TF StepStats: 577 nodes, 755
kernels, 987 tensors, 2128 allocations).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tracedb
from conftest import scenario
from test_lake import DUMP, LSTM, make_run
from test_lake_faults import wait_stopped
from test_object_storage import BUCKET, ROOT, s3  # noqa: F401 (the fixture)
from tracedb import catalog, lake
from tracedb.errors import WarehouseError


def _cli(args: list, env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tracedb.cli", *map(str, args)],
                            env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _counts(url: str, cache: Path) -> dict[str, tuple]:
    """Rows per run of each core table, read by a new reader (its own empty cache)."""
    env = {"TRACEDB_CACHE_DIR": str(cache)}
    p = _cli(["runs", "-f", "json", "-w", url], env)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return {r["run_id"]: (r["nodes"], r["kernels"], r["tensors"], r["allocations"]) for r in json.loads(out)}


def test_a_writer_paused_past_its_lease_after_its_publish_stops_its_clean_up(s3, tmp_path):
    url = f"s3://{BUCKET}/paused"
    # A lease long enough that a writer on a loaded machine still holds it when it reaches
    # its publish (with 3 s, A sometimes lost it before, in the whole suite, and stopped
    # "before publishing": not the case under test)
    lease = 10
    env = {"TRACEDB_LOCK_LEASE_SECONDS": str(lease)}
    assert tracedb.Warehouse(url).ingest(make_run(tmp_path / "v0" / "r", LSTM).parent).ok
    # A publishes r, reads which ingest is live, and stalls there, past its lease
    a = _cli(["ingest", make_run(tmp_path / "a" / "r", LSTM).parent, "-w", url],
             {**env, "TRACEDB_STOP_AT": "cleanup_after_published"})
    wait_stopped(a)
    time.sleep(lease + 0.5)
    # B takes the expired lease over and lands r again: the node dump
    b = _cli(["ingest", make_run(tmp_path / "b" / "r", DUMP).parent, "-w", url], env)
    _, err = b.communicate(timeout=300)
    assert b.returncode == 0, err
    os.kill(a.pid, signal.SIGCONT)
    _, err = a.communicate(timeout=300)
    last = err.strip().splitlines()[-1]
    assert a.returncode == 2, err
    assert "lost the commit lease" in last and "after publishing" in last
    assert _counts(url, tmp_path / "cache1") == {"r": DUMP}  # B's version, whole
    assert tracedb.Warehouse(url).check() == []


@pytest.fixture(scope="module")
def dead_data_lake(s3, tmp_path_factory) -> str:
    """A lake on S3 where r's first version is dead data: vacuum, optimize and rm each have
    work to do. Built once for the three commands: none of them may change it (each test
    compares the lake with itself before its command)."""
    url, tmp = f"s3://{BUCKET}/maint", tmp_path_factory.mktemp("maint")
    wh = tracedb.Warehouse(url)
    assert wh.ingest(make_run(tmp / "v0" / "r", LSTM).parent).ok
    assert wh.ingest(make_run(tmp / "v1" / "r", DUMP).parent).ok
    return url


@pytest.mark.parametrize("command", ["vacuum", "optimize", "rm"])
def test_maintenance_stops_once_its_lease_is_lost(dead_data_lake, command):
    lk = catalog.open_lake(dead_data_lake)
    versions, objects = lk.versions(), lk.storage.files_under("")
    with lk.lock():
        lease = lk.storage._lease
        lease.lost = True  # taken over while this writer stalled
        with pytest.raises(WarehouseError, match="lost the commit lease"):
            {"vacuum": lambda: lk.vacuum(0), "optimize": lk.optimize, "rm": lambda: lk.delete_runs(["r"])}[command]()
        assert lk.versions() == versions  # not one commit
        assert lk.storage.files_under("") - {lake.LOCK_FILE} == objects - {lake.LOCK_FILE}  # not one object deleted
        lease.lost = False  # this test's own lease after all: released, so the next command need not wait it out


def test_a_reader_with_no_cache_never_waits_for_a_stalled_writer_nor_writes(s3, tmp_path):
    url = f"s3://{BUCKET}/stalled"
    wh = tracedb.Warehouse(url)
    assert wh.ingest(make_run(tmp_path / "v0" / "r", DUMP).parent).ok
    # the writer commits r's new version, then stalls holding the lease (600 s here, so a
    # reader that waited for it could not finish within the bound below even on a loaded
    # machine, where the read alone took ~59 s) before it uploads the new snapshot: the
    # lake's catalog.duckdb is stale
    w = _cli(["ingest", make_run(tmp_path / "v1" / "r", LSTM).parent, "-w", url],
             {"TRACEDB_STOP_AT": "snapshot_before_rename", "TRACEDB_LOCK_LEASE_SECONDS": "600"})
    try:
        wait_stopped(w)
        st = lake.Lake(url).storage
        lease = st.read_bytes(lake.LOCK_FILE)
        snap = st.fs.info(st._p(catalog.CATALOG))["ETag"]
        start = time.monotonic()
        assert _counts(url, tmp_path / "new_reader") == {"r": LSTM}  # the lake as committed
        assert time.monotonic() - start < 300  # it never waited for the lease
        assert st.read_bytes(lake.LOCK_FILE) == lease  # the lease untouched
        assert st.fs.info(st._p(catalog.CATALOG))["ETag"] == snap  # nothing uploaded
    finally:
        w.kill()
        w.communicate()


def test_a_writer_that_loses_its_lease_before_publishing_leaves_files_as_they_were(s3, tmp_path):
    url = f"s3://{BUCKET}/lost-files"
    assert tracedb.Warehouse(url).ingest(make_run(tmp_path / "v0" / "r", DUMP).parent).ok
    lk = catalog.open_lake(url)
    before = lk.read_table("files").to_pylist()
    assert [r["path"] for r in before] == [scenario("node_shape_dump").name]
    new = {**before[0], "path": "other.txt", "format": "tf_stepstats", "ingest_id": "20990101T000000-000000"}
    with lk.lock():
        lk.storage._lease.lost = True  # taken over while this writer stalled
        with pytest.raises(WarehouseError, match="lost the commit lease .* before publishing"):
            lk.commit([lake.RunCommit({"run_id": "r"}, [], [new], replace=True, ingest_id=new["ingest_id"])])
    assert lk.read_table("files").to_pylist() == before  # `files` still describes the live version
    assert _counts(url, tmp_path / "cache") == {"r": DUMP}
