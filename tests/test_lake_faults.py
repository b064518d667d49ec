"""Faults that meet an ingest in a folder warehouse (issue 28): a vacuum with no
retention while an ingest waits to commit, a file gone before the commit, a crash between
the ingest log and the publish, a full disk while the snapshot is written, a reader with
no write permission, `tracedb check` at exit, and what a killed publish leaves.

Each ingest that must be caught between two steps is a `tracedb ingest` process stopped
there by the project's fault hook (TRACEDB_STOP_AT=<point>: SIGSTOP, resumed with SIGCONT)
or killed there (TRACEDB_CRASH_AT). Row counts per run are the two versions of a run of
tests/test_lake.py, read from the raw traces: the node dump (178 nodes) and the TF
StepStats trace (577 nodes, 755 kernels, 987 tensors, 2128 allocations).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from conftest import scenario
from test_lake import DUMP, ENV, LSTM, all_counts, cli, make_run
from tracedb import catalog
from tracedb.api import Warehouse
from tracedb.ingest import ingest
from tracedb.lake import Lake

DUMP_FILE = scenario("node_shape_dump").name
LSTM_FILE = scenario("tf_stepstats_gpu_streams").name


def start(*args, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tracedb.cli", *map(str, args)], env={**ENV, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_stopped(proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until the process has stopped itself at its TRACEDB_STOP_AT point."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode} before its stop point: {proc.stderr.read()}")
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail("never reached its stop point")


def resume(proc: subprocess.Popen) -> tuple[int, str]:
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def reingest_stopped(tmp_path: Path, point: str) -> tuple[Path, subprocess.Popen]:
    """A warehouse whose run r is the node dump, and a re-ingest of r as the TF trace
    stopped at `point`."""
    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "old" / "r", DUMP).parent], wh).ok
    proc = start("ingest", make_run(tmp_path / "new" / "r", LSTM).parent, "-w", wh, env={"TRACEDB_STOP_AT": point})
    wait_stopped(proc)
    return wh, proc


def unlogged_files(wh: Path) -> list[Path]:
    """Parquet files of the data tables that no Delta log lists (written, not committed)."""
    lake = Lake(wh)
    listed = {p for t in ("nodes", "kernels") for p in lake.add_actions(t).column("path").to_pylist()}
    return sorted(p for t in ("nodes", "kernels") for p in (wh / t).rglob("*.parquet")
                  if p.relative_to(wh).as_posix() not in listed)


# -- item 1: vacuum never deletes what a live ingest will commit -----------------------------

def test_vacuum_with_no_retention_during_an_ingest_spares_its_files(tmp_path):
    wh, proc = reingest_stopped(tmp_path, "ingest_before_commit")
    waiting = unlogged_files(wh)
    assert len(waiting) == 2  # nodes (both devices in one file), kernels: written, not committed
    r = cli("vacuum", "--retention-hours", "0", "-w", wh)
    assert r.returncode == 0
    assert all(p.is_file() for p in waiting)  # the live ingest's files were spared
    code, err = resume(proc)
    assert code == 0, err
    assert all_counts(wh) == {"r": LSTM}
    assert Warehouse(wh).check() == []
    # once it has finished, its mark is gone and nothing is spared any more
    assert list((wh / "_tracedb" / "ingests").iterdir()) == []


def test_vacuum_spares_a_live_ingest_only(tmp_path):
    """A mark no process holds (its ingest was killed) spares nothing."""
    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "old" / "r", DUMP).parent], wh).ok
    r = cli("ingest", make_run(tmp_path / "new" / "r", LSTM).parent, "-w", wh,
            env={**ENV, "TRACEDB_CRASH_AT": "ingest_before_commit"}, check=False)
    assert r.returncode == -signal.SIGKILL
    left = unlogged_files(wh)
    assert left and [p.name for p in (wh / "_tracedb" / "ingests").iterdir()] != []
    assert cli("vacuum", "--retention-hours", "0", "-w", wh).returncode == 0
    assert not any(p.exists() for p in left)
    assert list((wh / "_tracedb" / "ingests").iterdir()) == []
    assert all_counts(wh) == {"r": DUMP}


def test_a_commit_never_publishes_a_file_that_is_gone(tmp_path):
    wh, proc = reingest_stopped(tmp_path, "ingest_before_commit")
    victim = unlogged_files(wh)[0]
    victim.unlink()  # as a vacuum of an older tracedb, or an operator, would
    code, err = resume(proc)
    last = err.strip().splitlines()[-1]
    assert code == 2, err
    assert "gone or changed before its commit" in last and victim.relative_to(wh).as_posix() in last
    assert "run(s) r keep their previous version" in last
    assert all_counts(wh) == {"r": DUMP}
    assert Warehouse(wh).check() == []
    assert cli("check", "-w", wh).returncode == 0


# -- item 3: `files` and `tracedb runs` describe the live version after a crash --------------

def _runs_and_files(wh: Path) -> tuple[tuple, list[str]]:
    run = Warehouse(wh).runs().to_pylist()
    assert len(run) == 1 and run[0]["run_id"] == "r"
    counts = tuple(run[0][t] for t in ("nodes", "kernels", "tensors", "allocations"))
    paths = Warehouse(wh).sql("SELECT path FROM files WHERE run_id = 'r' ORDER BY path").column("path").to_pylist()
    return (counts, tuple(run[0]["formats"])), paths


def _delta_files(wh: Path) -> list[str]:
    """`files` as the Delta table holds it, read by delta-rs alone."""
    t = DeltaTable(str(wh / "files")).to_pyarrow_table(columns=["run_id", "path"])
    return sorted(p for r, p in zip(t.column("run_id").to_pylist(), t.column("path").to_pylist()) if r == "r")


@pytest.mark.parametrize("point, live", [("ingest_after_files", "old"), ("ingest_after_publish", "new")])
def test_a_crash_around_the_publish_leaves_files_and_runs_describing_the_live_version(tmp_path, point, live):
    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "old" / "r", DUMP).parent], wh).ok
    (old_counts, old_formats), old_paths = _runs_and_files(wh)
    assert old_counts == (178, 0, 0, 0) and old_paths == [DUMP_FILE]
    r = cli("ingest", make_run(tmp_path / "new" / "r", LSTM).parent, "-w", wh,
            env={**ENV, "TRACEDB_CRASH_AT": point}, check=False)
    assert r.returncode == -signal.SIGKILL
    want_counts, want_path = (DUMP, DUMP_FILE) if live == "old" else (LSTM, LSTM_FILE)
    assert all_counts(wh) == {"r": want_counts}
    (counts, formats), paths = _runs_and_files(wh)
    assert counts == want_counts and paths == [want_path]
    if live == "old":
        assert formats == old_formats
    else:
        assert formats != old_formats
    assert cli("vacuum", "--retention-hours", "0", "-w", wh).returncode == 0
    assert _delta_files(wh) == [want_path]  # the Delta table itself (other engines) repaired
    assert _runs_and_files(wh) == ((counts, formats), paths)
    # the crashed attempt stays in the history
    assert len(Warehouse(wh).sql("SELECT DISTINCT ingest_id FROM ingest_log WHERE run_id = 'r'")) == 2


# -- item 4: a full disk while the snapshot is written ---------------------------------------

def _file_size_limit(limit: int):
    def set_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_full_disk_never_puts_a_partial_snapshot_in_place(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "old" / "r", DUMP).parent], wh).ok
    before = _sha(wh / catalog.CATALOG)
    assert (wh / catalog.CATALOG).stat().st_size > 300_000  # a snapshot is larger than the limit below
    # every data file of the TF trace is far below 300 kB: only the snapshot meets the limit
    full = _file_size_limit(300_000)
    r = subprocess.run([sys.executable, "-m", "tracedb.cli", "ingest", str(make_run(tmp_path / "new" / "r", LSTM).parent),
                        "-w", str(wh)], env=ENV, capture_output=True, text=True, preexec_fn=full)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2, r.stderr
    assert "the runs were committed" in last and "could not be written" in last
    assert "keep their previous version" not in last
    assert _sha(wh / catalog.CATALOG) == before  # the old snapshot, whole
    assert not [p for p in wh.iterdir() if p.name.startswith(".catalog-")]

    # a reader on the same full disk: the lake's runs, from a snapshot built in memory
    code = ("import json, sys, tracedb; print(json.dumps(tracedb.Warehouse(sys.argv[1]).sql("
            "'SELECT run_id, count(*) AS n FROM nodes GROUP BY run_id').to_pylist()))")
    r = subprocess.run([sys.executable, "-c", code, str(wh)], env=ENV, capture_output=True, text=True,
                       preexec_fn=full)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"run_id": "r", "n": LSTM[0]}]
    assert _sha(wh / catalog.CATALOG) == before  # nothing half-written was put in place
    con = duckdb.connect(str(wh / catalog.CATALOG), read_only=True)  # a BI client
    assert con.execute("SELECT count(*) FROM tracedb_runs").fetchone()[0] == 1
    con.close()
    # room again: the next reader writes the new snapshot
    assert all_counts(wh) == {"r": LSTM}
    assert _sha(wh / catalog.CATALOG) != before


# -- item 7: a reader without write permission --------------------------------------------

def _tree(wh: Path) -> dict[str, tuple]:
    return {p.relative_to(wh).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in wh.rglob("*")}


def test_a_reader_without_write_permission_reads_and_never_writes(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "old" / "r", DUMP).parent], wh).ok
    # the snapshot is stale: the new version committed, its snapshot never renamed into place
    r = cli("ingest", make_run(tmp_path / "new" / "r", LSTM).parent, "-w", wh,
            env={**ENV, "TRACEDB_CRASH_AT": "snapshot_before_rename"}, check=False)
    assert r.returncode == -signal.SIGKILL
    for p in [wh, *wh.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    tree = _tree(wh)
    # root writes anywhere: drop the capability that lets it, as an ordinary user has none
    prefix = ["setpriv", "--bounding-set", "-dac_override"] if os.geteuid() == 0 else []
    try:
        r = subprocess.run([*prefix, sys.executable, "-m", "tracedb.cli", "runs", "-f", "json", "-w", str(wh)],
                           env=ENV, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr and "PermissionError" not in r.stderr
        [run] = json.loads(r.stdout)
        assert (run["nodes"], run["kernels"], run["tensors"], run["allocations"]) == LSTM
        assert _tree(wh) == tree  # nothing written, not even the lock file
    finally:
        for p in [wh, *wh.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)


# -- smaller: check names only damaged live versions; vacuum removes a killed publish's file --

def test_check_ignores_files_of_no_runs_live_version(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "old" / "r", DUMP).parent], wh).ok
    r = cli("ingest", make_run(tmp_path / "new" / "r", LSTM).parent, "-w", wh,
            env={**ENV, "TRACEDB_CRASH_AT": "ingest_after_add"}, check=False)
    assert r.returncode == -signal.SIGKILL
    lake = Lake(wh)
    live = lake.published()["r"]
    dead = [p for p in lake.add_actions("kernels").to_pylist() if p["min_ingest"] != live]
    assert dead  # logged by the killed ingest, never published
    (wh / dead[0]["path"]).unlink()
    r = cli("check", "-w", wh, check=False)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr
    live_file = sorted(lake.live_files("nodes")[0])[0]
    (wh / live_file).write_bytes(b"damaged")
    r = cli("check", "-w", wh, check=False)
    assert r.returncode == 1 and f"damaged: run r: {live_file}:" in r.stderr


def test_vacuum_removes_the_snapshot_file_a_killed_publish_left(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "old" / "r", DUMP).parent], wh).ok
    r = cli("ingest", make_run(tmp_path / "new" / "r", LSTM).parent, "-w", wh,
            env={**ENV, "TRACEDB_CRASH_AT": "snapshot_before_rename"}, check=False)
    assert r.returncode == -signal.SIGKILL
    left = [p for p in wh.iterdir() if p.name.startswith(".catalog-")]
    assert left
    r = cli("vacuum", "-w", wh)
    assert r.returncode == 0
    assert not any(p.exists() for p in left)
    assert all_counts(wh) == {"r": LSTM}


# -- item 9: `tracedb check` exits 0, every time ---------------------------------------------

def test_check_hands_pyarrow_paths_or_native_files_never_python_file_objects(tmp_path, monkeypatch):
    """The abort's cause, checked every time: pyarrow's threads reading a Python file
    object through the GIL aborted the process at exit (SIGABRT) in ~8% of checks. Put
    back, that cause made only 2 of 200 checks abort on a loaded machine, so the loop
    below cannot guard it alone; this test fails on it at once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "runs" / "r", LSTM).parent], wh).ok
    seen, read_table, parquet_file = [], pq.read_table, pq.ParquetFile

    def recording(source, *args, **kwargs):
        seen.append(source)
        return read_table(source, *args, **kwargs)

    class Recording(parquet_file):
        def __init__(self, source, *args, **kwargs):
            seen.append(source)
            super().__init__(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", recording)
    monkeypatch.setattr(pq, "ParquetFile", Recording)
    assert Warehouse(wh).check() == []
    assert len(seen) > 10  # every live file was read
    flat = [x for s in seen for x in (s if isinstance(s, list) else [s])]  # a table's files at once
    bad = [x for x in flat if not isinstance(x, (str, Path, pa.NativeFile, pa.Buffer))]
    assert not bad, bad


@pytest.mark.slow
def test_check_exits_0_thirty_times_in_a_row(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "runs" / "r", LSTM).parent], wh).ok
    # a process a check, as a nightly job runs it, two at a time (the abort was seen both
    # alone and with two at once; two at a time also halves the test's wall time). The
    # abort hit ~8% of checks when it was found (30 in a row then pass with p ~0.08); its
    # cause is guarded deterministically by the test above, so this loop checks the
    # whole command's exit code, each check kept cheap (`tracedb check` refuses pandas
    # and numpy: ~0.9 instead of ~1.5 s of CPU).
    script = ('seq 30 | xargs -P 2 -I{} sh -c \'"$PY" -m tracedb.cli check -w "$WH" >/dev/null 2>"$ERR.{}" '
              '|| echo "exit $?: $(tail -1 "$ERR.{}")"\' > "$ERR.all"; '
              'cat "$ERR.all"; echo "failed $(wc -l < "$ERR.all")"')
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=1800,
                       env={**ENV, "PY": sys.executable, "WH": str(wh), "ERR": str(tmp_path / "err")})
    assert r.stdout.strip().splitlines()[-1] == "failed 0", r.stdout
