"""The lake (Delta Lake) and its snapshot: readers and writers independent, concurrent
writers, no half runs, SIGKILL anywhere.

Two versions of one run are used throughout, with counts read from the raw traces by
tests/rawtrace.py-style regexes elsewhere in the suite (node dump: 178 nodes; TF StepStats:
577 nodes, 755 kernels, 987 tensors, 2128 allocations):
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from conftest import data_files, scenario
from tracedb import catalog, schema
from tracedb.ingest import ingest
from tracedb.api import Warehouse
from tracedb.lake import Lake

ROOT = Path(__file__).resolve().parent.parent
# (nodes, kernels, tensors, allocations) of each version of a run
DUMP = (178, 0, 0, 0)
LSTM = (577, 755, 987, 2128)
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*args, cwd=None, env=None, check=True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracedb.cli", *map(str, args)], cwd=cwd,
                          env=env or ENV, capture_output=True, text=True, check=check)


def make_run(folder: Path, version: tuple) -> Path:
    """A run folder holding the trace of `version` (DUMP or LSTM)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    src = scenario("node_shape_dump" if version == DUMP else "tf_stepstats_gpu_streams")
    shutil.copy(src, folder / src.name)
    return folder


def run_counts(con, run_id: str) -> tuple:
    return tuple(con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [run_id]).fetchone()[0]
                 for t in schema.CORE_TABLES)


def all_counts(wh: Path) -> dict[str, tuple]:
    con = catalog.connect(wh)
    try:
        ids = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY 1").fetchall()]
        return {r: run_counts(con, r) for r in ids}
    finally:
        con.close()


def delta_counts(wh: Path, live_only: bool = True) -> dict[str, tuple]:
    """Rows per run of each Delta table read by delta-rs, and by polars, without tracedb,
    keeping the rows of each run's live ingest (`(run_id, ingest_id)` in `runs`, the
    filter every engine applies: a file holds many runs, and a re-ingested run's old rows
    stay in their file until `optimize`); live_only=False: every row the log lists."""
    import polars as pl
    from deltalake import DeltaTable

    live = set(zip(*(DeltaTable(str(wh / "runs")).to_pyarrow_table(columns=["run_id", "ingest_id"])
                     .column(c).to_pylist() for c in ("run_id", "ingest_id"))))
    out = {}
    for t in schema.CORE_TABLES:
        rs = DeltaTable(str(wh / t)).to_pyarrow_table(columns=["run_id", "ingest_id"])
        by_rs = [r for r, i in zip(rs.column("run_id").to_pylist(), rs.column("ingest_id").to_pylist())
                 if not live_only or (r, i) in live]
        pl_rows = pl.read_delta(str(wh / t)).select("run_id", "ingest_id").rows()
        by_pl = [r for r, i in pl_rows if not live_only or (r, i) in live]
        assert sorted(by_rs) == sorted(by_pl), t
        for r in set(by_rs):
            out.setdefault(r, [0] * len(schema.CORE_TABLES))[schema.CORE_TABLES.index(t)] = by_rs.count(r)
    return {r: tuple(v) for r, v in out.items()}


def test_other_engines_read_the_lake_without_tracedb(tmp_path):
    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "runs" / "a", DUMP).parent], wh)
    ingest([make_run(tmp_path / "runs2" / "b", LSTM).parent], wh)
    assert all_counts(wh) == {"a": DUMP, "b": LSTM}
    assert delta_counts(wh) == {"a": DUMP, "b": LSTM}
    # re-ingest: the superseded rows are not live (filtered), and `optimize` removes them
    # from the Delta tables: every row the log then lists is live
    ingest([make_run(tmp_path / "runs" / "a", LSTM).parent], wh)
    assert all_counts(wh) == delta_counts(wh) == {"a": LSTM, "b": LSTM}
    Warehouse(wh).optimize()
    assert all_counts(wh) == delta_counts(wh, live_only=False) == {"a": LSTM, "b": LSTM}
    import polars as pl

    runs = pl.read_delta(str(wh / "runs"))
    assert sorted(runs.get_column("run_id").to_list()) == ["a", "b"]


def _first_entry(table_dir: Path) -> dict:
    """A table's Delta log entry 0 by action, less what differs from one creation to the next."""
    import json

    entry = {}
    for line in (table_dir / "_delta_log" / f"{0:020d}.json").read_text().splitlines():
        (kind, action), = json.loads(line).items()
        entry[kind] = action
    for key in ("id", "createdTime"):
        entry["metaData"].pop(key)
    entry.pop("commitInfo")
    return entry


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_new_folder_lakes_tables_are_those_delta_rs_creates(tmp_path, partitioned):
    """A new lake in a folder writes each table's first log entry itself: its protocol and
    metadata (schema, name, description, partition columns, properties) are what delta-rs's
    own `write_deltalake` of an empty table writes, for every table and both layouts."""
    from deltalake import DeltaTable, write_deltalake

    from tracedb.lake import NO_ACTIONS, delta_schema

    lake = Lake(tmp_path / "wh")
    lake.partition_new_tables = partitioned
    lake.ensure_tables()
    for table in schema.ALL_TABLES:
        parts, props = lake._new_layout(table)
        theirs = tmp_path / "delta-rs" / table
        write_deltalake(str(theirs), delta_schema(table).empty_table(), mode="ignore", partition_by=parts, name=table,
                        description=schema.TABLE_DOCS.get(table), configuration=props)
        assert _first_entry(tmp_path / "wh" / table) == _first_entry(theirs), table
        assert sorted(os.listdir(tmp_path / "wh" / table / "_delta_log")) == [f"{0:020d}.json"], table
        dt = DeltaTable(str(tmp_path / "wh" / table))
        assert (dt.version(), dt.file_uris(), dt.metadata().partition_columns) == (0, [], parts or []), table
        # what the lake knows of the new table without opening it is what it reads from it
        assert Lake(tmp_path / "wh").add_actions(table).equals(NO_ACTIONS), table
        assert lake.add_actions(table).equals(NO_ACTIONS), table
    # a table in place is left alone: no entry replaced, none added
    before = {t: (tmp_path / "wh" / t / "_delta_log" / f"{0:020d}.json").read_bytes() for t in schema.ALL_TABLES}
    Lake(tmp_path / "wh").ensure_tables()
    assert {t: (tmp_path / "wh" / t / "_delta_log" / f"{0:020d}.json").read_bytes() for t in schema.ALL_TABLES} == before
    assert not lake.storage.write_new(f"runs/_delta_log/{0:020d}.json", b"{}")
    assert (tmp_path / "wh" / "runs" / "_delta_log" / f"{0:020d}.json").read_bytes() == before["runs"]
    assert sorted(os.listdir(tmp_path / "wh" / "runs" / "_delta_log")) == [f"{0:020d}.json"]


def test_a_table_whose_creation_was_killed_is_created(tmp_path):
    """A writer killed while writing a new table's first log entry leaves its temporary
    file in the log folder, and no entry: the next writer creates the table."""
    from deltalake import DeltaTable

    log = tmp_path / "wh" / "runs" / "_delta_log"
    log.mkdir(parents=True)
    (log / f".{0:020d}.json-1234-abcd1234.tmp").write_bytes(b'{"commitInfo":')
    Lake(tmp_path / "wh").ensure_tables()
    assert DeltaTable(str(tmp_path / "wh" / "runs")).version() == 0
    assert (log / f"{0:020d}.json").is_file()


def test_snapshot_opens_from_any_folder_and_is_rebuilt_when_missing_or_moved(tmp_path):
    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "runs" / "a", LSTM).parent], wh)
    # any client, any working directory, no setup statement
    con = duckdb.connect(str(wh / "catalog.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 755
    con.close()
    (wh / "catalog.duckdb").unlink()
    assert all_counts(wh) == {"a": LSTM}  # rebuilt from the lake by the next command
    moved = tmp_path / "elsewhere" / "wh"
    shutil.move(wh, moved)
    assert all_counts(moved) == {"a": LSTM}  # the old snapshot named the old folder: rebuilt
    con = duckdb.connect(str(moved / "catalog.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 755


def test_damaged_snapshot_is_rebuilt(tmp_path):
    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "runs" / "a", DUMP).parent], wh)
    (wh / "catalog.duckdb").write_bytes(b"not a database")
    assert all_counts(wh) == {"a": DUMP}


class DuckDBCli:
    """The DuckDB CLI from PyPI (its own DuckDB), kept open on the catalog, read-only."""

    def __init__(self, db: Path, cwd: Path):
        self.p = subprocess.Popen([sys.executable, "-m", "duckdb_cli", "-readonly", "-csv", str(db)],
                                  cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, bufsize=1)

    def ask(self, sql: str) -> list[str]:
        self.p.stdin.write(sql.rstrip(";") + ";\n.print __END__\n")
        self.p.stdin.flush()
        lines = []
        while (line := self.p.stdout.readline().rstrip("\n")) != "__END__":
            assert line or self.p.poll() is None, "duckdb CLI exited"
            lines.append(line)
        return lines

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


COUNT_SQL = "SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM kernels) AS kernels"


def test_open_bi_clients_do_not_block_ingest_and_keep_their_snapshot(tmp_path):
    """A DuckDB CLI process and a SQLAlchemy (duckdb-engine) connection hold the catalog
    open across a whole `tracedb ingest` of several runs: the ingest succeeds, the open
    connections keep answering with the old runs, new connections see the new ones."""
    import sqlalchemy  # with duckdb-engine and duckdb-cli: test dependencies (pyproject)
    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "first" / "r0", LSTM).parent], wh)
    elsewhere = tmp_path / "somewhere_else"
    elsewhere.mkdir()
    db = wh / "catalog.duckdb"
    shell = DuckDBCli(db, cwd=elsewhere)
    engine = sqlalchemy.create_engine(f"duckdb:///{db}", connect_args={"read_only": True})
    conn = engine.connect()
    try:
        assert shell.ask(COUNT_SQL) == ["runs,kernels", "1,755"]
        assert tuple(conn.execute(sqlalchemy.text(COUNT_SQL)).one()) == (1, 755)
        batch = tmp_path / "tonight"
        for i in range(3):
            make_run(batch / f"r{i + 1}", LSTM)
        make_run(batch / "r0", DUMP)  # and a re-ingest of the run they are reading
        done = cli("ingest", batch, "-w", wh)
        assert done.returncode == 0, done.stderr
        # the open connections still answer, from their snapshot
        assert shell.ask(COUNT_SQL) == ["runs,kernels", "1,755"]
        assert shell.ask("SELECT count(*) AS n FROM nodes WHERE run_id = 'r0'") == ["n", "577"]
        assert tuple(conn.execute(sqlalchemy.text(COUNT_SQL)).one()) == (1, 755)
    finally:
        shell.close()
        conn.close()
        engine.dispose()
    # a new connection, from another folder, with no setup statement, sees the new runs
    fresh = DuckDBCli(db, cwd=elsewhere)
    try:
        assert fresh.ask(COUNT_SQL) == ["runs,kernels", f"4,{3 * 755}"]
        assert fresh.ask("SELECT count(*) AS n FROM nodes WHERE run_id = 'r0'") == ["n", "178"]
    finally:
        fresh.close()
    engine = sqlalchemy.create_engine(f"duckdb:///{db}", connect_args={"read_only": True})
    with engine.connect() as c:
        assert tuple(c.execute(sqlalchemy.text(COUNT_SQL)).one()) == (4, 3 * 755)
    engine.dispose()


@pytest.mark.slow
def test_four_writers_at_once(tmp_path):
    """4 `tracedb ingest` processes into one lake at once: two on different runs, two on
    the same run. Every run whole, no duplicate rows, equal counts in DuckDB, delta-rs and
    polars."""
    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "seed" / "shared", DUMP).parent], wh)  # the lake exists
    batches = []
    for w in range(4):
        b = tmp_path / f"writer{w}"
        if w < 2:  # different runs, two per writer
            make_run(b / f"own{w}a", LSTM)
            make_run(b / f"own{w}b", DUMP)
        make_run(b / "shared", LSTM if w % 2 else DUMP)  # every writer re-ingests `shared`
        batches.append(b)
    procs = [subprocess.Popen([sys.executable, "-m", "tracedb.cli", "ingest", str(b), "-w", str(wh), "-q"],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for b in batches]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    got = all_counts(wh)
    assert got.pop("shared") in (DUMP, LSTM)  # exactly one complete version
    assert got == {"own0a": LSTM, "own0b": DUMP, "own1a": LSTM, "own1b": DUMP}
    both = all_counts(wh)
    assert delta_counts(wh) == {r: c for r, c in both.items() if any(c)}
    con = catalog.connect(wh)
    # no duplicated rows: every (run, source row position) once
    assert con.execute("SELECT count(*) FROM (SELECT run_id, device, seq, count(*) n FROM nodes "
                       "GROUP BY ALL HAVING n > 1)").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 5


@pytest.mark.slow
def test_readers_never_see_a_partial_run(tmp_path):
    """Readers query in a loop while another process re-ingests a run (alternating two
    versions) and deletes it: each answer is one whole version of the run, or no run."""
    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "v" / "r", DUMP).parent], wh)
    script = tmp_path / "writer.sh"
    dump, lstm = tmp_path / "dump", tmp_path / "lstm"
    make_run(dump / "r", DUMP), make_run(lstm / "r", LSTM)
    py = f"{sys.executable} -m tracedb.cli"
    script.write_text("set -e\n" + "".join(
        f"{py} ingest {lstm} -w {wh} -q\n{py} ingest {dump} -w {wh} -q\n"
        + (f"{py} rm r -w {wh}\n" if i % 2 else "") for i in range(2)))
    writer = subprocess.Popen(["bash", str(script)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    held = catalog.connect(wh)  # one connection kept open the whole time
    seen = set()
    try:
        while writer.poll() is None:
            con = catalog.connect(wh)
            try:
                got = run_counts(con, "r")
            finally:
                con.close()
            assert got in (DUMP, LSTM, (0, 0, 0, 0)), got
            seen.add(got)
            assert run_counts(held, "r") == DUMP
    finally:
        writer.wait(timeout=300)
        held.close()
    assert writer.returncode == 0, writer.stderr.read()
    assert len(seen) >= 2  # the readers did see the run change


CRASH_POINTS = ["ingest_after_add", "ingest_after_files", "ingest_after_publish", "ingest_after_cleanup",
                "snapshot_before_rename"]


def assert_whole_and_clean(wh: Path, allowed: dict[str, tuple]) -> None:
    """Every run is one of its allowed versions; after vacuum, no file on disk is unknown
    to the log and every file the log lists exists."""
    got = all_counts(wh)
    for run, counts in got.items():
        assert counts in allowed[run], (run, counts)
    lake = Lake(wh)
    from tracedb.api import Warehouse

    Warehouse(wh).vacuum(retention_hours=0)
    listed = sorted(p for t in schema.TABLES for p in lake.add_actions(t).column("path").to_pylist())
    assert data_files(wh) == listed
    assert all_counts(wh) == got


@pytest.mark.slow
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_sigkill_at_every_step_of_a_reingest(tmp_path, point):
    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "old" / "r", DUMP).parent, make_run(tmp_path / "old2" / "s", LSTM).parent], wh)
    new = make_run(tmp_path / "new" / "r", LSTM).parent
    make_run(new / "t", LSTM)
    r = cli("ingest", new, "-w", wh, env={**ENV, "TRACEDB_CRASH_AT": point}, check=False)
    assert r.returncode == -signal.SIGKILL
    published = point != "ingest_after_add" and point != "ingest_after_files"
    assert_whole_and_clean(wh, {"r": [LSTM] if published else [DUMP], "s": [LSTM], "t": [LSTM]})
    assert cli("ingest", new, "-w", wh).returncode == 0  # a rerun completes
    assert all_counts(wh) == {"r": LSTM, "s": LSTM, "t": LSTM}


@pytest.mark.slow
def test_sigkill_during_rm_and_optimize(tmp_path):
    wh = tmp_path / "wh"
    runs = tmp_path / "runs"
    for i in range(3):
        (runs / "multi").mkdir(parents=True, exist_ok=True)
        shutil.copy(scenario("node_shape_dump"), runs / "multi" / f"step_{i}.txt")
    make_run(runs / "gone", LSTM)
    ingest([runs], wh)
    multi = (3 * 178, 0, 0, 0)
    r = cli("rm", "gone", "-w", wh, env={**ENV, "TRACEDB_CRASH_AT": "rm_after_unpublish"}, check=False)
    assert r.returncode == -signal.SIGKILL
    assert_whole_and_clean(wh, {"multi": [multi]})
    for table in ("nodes", "kernels"):
        r = cli("optimize", "-w", wh, env={**ENV, "TRACEDB_CRASH_AT": f"optimize_after_{table}"}, check=False)
        assert r.returncode == -signal.SIGKILL
        assert_whole_and_clean(wh, {"multi": [multi]})
    assert cli("optimize", "-w", wh).returncode == 0
    assert_whole_and_clean(wh, {"multi": [multi]})
    assert len(Lake(wh).live_files("nodes")[0]) == 1  # the run's three step files, merged at ingest


def wait_for_session_to_end(sid: int, timeout: float = 30.0) -> None:
    """Wait until no process of the killed ingest's session is left: its reader workers
    notice the caller's death within ~0.5 s (`workers._exit_with`) and until then may
    still finish a data file, which a vacuum run at once would find unknown to the log
    (harmless: the next vacuum deletes it; seen once under load)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(sid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes of the killed ingest (session {sid}) still run after {timeout} s")


@pytest.mark.slow
def test_sigkill_at_random_moments(tmp_path):
    """Kill `tracedb ingest`, `rm` and `optimize` after random delays (seeded): every run is
    old or new, whole; a rerun completes; vacuum leaves no orphan."""
    rng = random.Random(20261126)
    wh = tmp_path / "wh"
    old, new = tmp_path / "old", tmp_path / "new"
    for i in range(4):
        make_run(old / f"r{i}", DUMP)
        make_run(new / f"r{i}", LSTM)
    ingest([old], wh)
    for trial in range(8):
        cmd = rng.choice([["ingest", new], ["ingest", old], ["optimize"], ["rm", "r3"]])
        if cmd[0] == "rm" and "r3" not in all_counts(wh):
            cmd = ["ingest", old]
        p = subprocess.Popen([sys.executable, "-m", "tracedb.cli", *map(str, cmd), "-w", str(wh)],
                             env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        time.sleep(rng.uniform(0.5, 3.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        wait_for_session_to_end(p.pid)
        assert_whole_and_clean(wh, {f"r{i}": [DUMP, LSTM] for i in range(4)})
    assert cli("ingest", new, "-w", wh).returncode == 0
    assert all_counts(wh) == {f"r{i}": LSTM for i in range(4)}


def test_optimize_compacts_and_keeps_every_row(tmp_path):
    """Three ingests write three files a table (one a group); `r1` re-ingested alone leaves
    its old rows in the first group's file (hidden by the live-ingest filter). optimize
    merges the files into one, in run order, with every live row and none of the old."""
    wh = tmp_path / "wh"
    runs = tmp_path / "runs"
    for name in ("r0", "r1", "r2"):
        make_run(runs / "first" / name if name != "r2" else runs / "second" / name, LSTM)
    ingest([runs / "first"], wh)
    ingest([runs / "second"], wh)
    ingest([runs / "first" / "r1"], wh, run_id="r1")  # r1 again: its old rows stay in r0's file
    before = all_counts(wh)
    assert before == {"r0": LSTM, "r1": LSTM, "r2": LSTM}
    assert delta_counts(wh, live_only=False)["r1"] == tuple(2 * n for n in LSTM)
    con = catalog.connect(wh)
    per_run = con.execute("SELECT run_id, count(*), sum(duration_ns) FROM kernels GROUP BY 1 ORDER BY 1").fetchall()
    con.close()
    assert per_run == [(r, 755, 7_590_000) for r in ("r0", "r1", "r2")]
    assert len(Lake(wh).live_files("kernels")[0]) == 3
    held = catalog.connect(wh)  # an open snapshot survives optimize (files stay until vacuum)
    done = cli("optimize", "-w", wh)
    assert "kernels 3 file(s)" in done.stdout
    assert all_counts(wh) == before
    assert delta_counts(wh, live_only=False) == before  # r1's old rows are gone from the log's files
    assert held.execute("SELECT count(*) FROM kernels").fetchone()[0] == 3 * 755
    held.close()
    con = catalog.connect(wh)
    assert con.execute("SELECT run_id, count(*), sum(duration_ns) FROM kernels GROUP BY 1 ORDER BY 1").fetchall() == per_run
    [path] = Lake(wh).live_files("kernels")[0]
    import pyarrow.parquet as pq

    runs_in_file = pq.read_table(wh / path, columns=["run_id"]).column("run_id").to_pylist()
    assert runs_in_file == sorted(runs_in_file)  # in run order: a run's rows are one stretch


def test_check_names_damaged_runs_and_the_repair(tmp_path):
    """Bit rot, a truncated file and a missing file are each named with their run; the
    repair it suggests (re-ingest) makes the warehouse whole again."""
    from typer.testing import CliRunner

    from tracedb.cli import app

    wh = tmp_path / "wh"
    runs = tmp_path / "runs"
    for name in ("a", "b", "c", "ok"):
        make_run(runs / name, LSTM)
        ingest([runs / name], wh, run_id=name)  # a file a run
    runner = CliRunner()
    assert runner.invoke(app, ["check", "-w", str(wh)]).exit_code == 0
    lake = Lake(wh)
    files = {r["run_id"]: r["path"] for r in lake.add_actions("kernels").to_pylist()}
    rot = bytearray((wh / files["a"]).read_bytes())
    for i in range(200, 216):  # 16 flipped bytes inside a data page, size unchanged
        rot[i] ^= 0xFF
    (wh / files["a"]).write_bytes(bytes(rot))
    (wh / files["b"]).write_bytes((wh / files["b"]).read_bytes()[:-100])
    (wh / files["c"]).unlink()
    r = runner.invoke(app, ["check", "-w", str(wh)])
    assert r.exit_code == 1
    assert "run a: " in r.output and "SHA-256" in r.output
    assert "run b: " in r.output and "size" in r.output
    assert "run c: " in r.output and "missing" in r.output
    assert "run ok" not in r.output and "3 damaged run(s): a, b, c" in r.output
    assert "tracedb ingest" in r.output
    for name in ("a", "b", "c"):
        res = runner.invoke(app, ["ingest", str(runs / name), "--run-id", name, "-w", str(wh)]); assert res.exit_code == 0, res.output
    assert runner.invoke(app, ["check", "-w", str(wh)]).exit_code == 0
    assert all_counts(wh) == {r: LSTM for r in ("a", "b", "c", "ok")}


def test_long_non_ascii_run_id_lands_and_reads_back_everywhere(tmp_path):
    """Issue 13 #13: a legal 200-byte non-ASCII run id (percent-encoding every byte made a
    600-byte folder name). From schema 8 no folder is named after a run: a 300-byte id
    (then "too long for a folder name") lands too."""
    wh = tmp_path / "wh"
    name = "実験" * 33 + "ab"
    assert len(name.encode()) == 200
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id=name).ok
    assert all_counts(wh) == {name: LSTM}
    assert delta_counts(wh) == {name: LSTM}
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="x" * 300).ok
    assert all_counts(wh) == delta_counts(wh) == {name: LSTM, "x" * 300: LSTM}


def test_lost_catalog_never_costs_data(tmp_path):
    """Issue 13 #2: with catalog.duckdb lost, vacuum and ingest used to start an empty
    catalog and delete every data file. The lake's log is the truth: nothing it lists goes."""
    from tracedb.api import Warehouse

    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "runs" / "a", LSTM).parent], wh)
    before = data_files(wh)
    (wh / "catalog.duckdb").unlink()
    assert Warehouse(wh).vacuum(retention_hours=0) == []
    assert data_files(wh) == before
    (wh / "catalog.duckdb").unlink()
    ingest([make_run(tmp_path / "runs2" / "b", DUMP).parent], wh)
    assert all_counts(wh) == {"a": LSTM, "b": DUMP}


def test_writable_connection_is_a_private_copy(tmp_path):
    """Warehouse.connect(read_only=False): the views work and scratch tables can be made,
    without touching the shared snapshot."""
    from tracedb.api import Warehouse

    wh = tmp_path / "wh"
    ingest([make_run(tmp_path / "runs" / "a", LSTM).parent], wh)
    con = Warehouse(wh).connect(read_only=False)
    con.execute("CREATE TABLE scratch AS SELECT name, count(*) n FROM kernels GROUP BY 1")
    assert con.execute("SELECT sum(n) FROM scratch").fetchone()[0] == 755
    assert con.execute("SELECT count(*) FROM files").fetchone()[0] == 1
    con.close()
    snap = duckdb.connect(str(wh / "catalog.duckdb"), read_only=True)
    assert "scratch" not in {r[0] for r in snap.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
