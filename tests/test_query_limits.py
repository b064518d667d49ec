"""Issue 28 item 11: a query stops on Ctrl-C within a second, at its time limit, and
within its memory and temp-space limits, spilling only to a private folder under $TMPDIR
(never the working folder); `Warehouse(path, limits=QueryLimits(...))` in Python."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rawtrace
from conftest import scenario
from tracedb import QueryLimits, Warehouse
from tracedb.cli import app
from tracedb.errors import TracedbError

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
# Minutes of work for DuckDB on any machine, nothing read from disk.
ENDLESS = "SELECT count(*) AS n FROM range(100000000000) t(a) WHERE a % 7 = 3"
# A sort whose hash table (~200 MB) must spill under a 50MB memory limit.
SPILLS = "SELECT a, count(*) AS n FROM range(5000000) t(a) GROUP BY a ORDER BY a DESC LIMIT 1"


@pytest.fixture(scope="module")
def lstm(tmp_path_factory):
    wh = tmp_path_factory.mktemp("limits") / "wh"
    assert Warehouse(wh).ingest(scenario("tf_stepstats_gpu_streams"), run_id="lstm").ok
    return wh


def _read_until_exit(fd, pid, limit_s):
    out, status, until = b"", None, time.monotonic() + limit_s
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                out += os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                pass
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
    return out.decode(errors="replace"), status


def test_ctrl_c_in_a_terminal_stops_a_query_within_a_second(lstm, tmp_path):
    sql = tmp_path / "endless.sql"
    sql.write_text(ENDLESS + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACEDB_WAREHOUSE": str(lstm)}
    pid, fd = pty.fork()
    if pid == 0:  # the child: `tracedb query` with the pty as its terminal
        os.execve(sys.executable, [sys.executable, "-m", "tracedb", "query", str(sql)], env)
    try:
        status = None
        time.sleep(3)  # started, and the query running
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the query ended by itself"
        os.write(fd, b"\x03")  # Ctrl-C as typed: the terminal sends SIGINT to the process group
        pressed = time.monotonic()
        out, status = _read_until_exit(fd, pid, 10)
        took = time.monotonic() - pressed
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert status is not None, f"still running 10 s after Ctrl-C: {out!r}"
    assert took < 1.0, took
    assert os.waitstatus_to_exitcode(status) == 130, out
    lines = [ln for ln in out.replace("\r", "").replace("^C", "").splitlines() if ln.strip()]  # ^C: the echo
    assert lines == ["tracedb: interrupted"], out


def test_timeout_stops_the_query_with_one_line(lstm):
    t = time.monotonic()
    r = runner.invoke(app, ["query", "-", "-w", str(lstm), "--timeout", "1.5"], input=ENDLESS)
    assert r.exit_code == 2 and time.monotonic() - t < 6, r.output
    assert r.output.strip().splitlines() == [
        "tracedb: error: stdin: stopped after 1.5 s, the query time limit (--timeout SECONDS, 0 for none; "
        "QueryLimits.timeout_s in Python)"]


def test_python_limits_and_keyboard_interrupt(lstm):
    wh = Warehouse(lstm, limits=QueryLimits(timeout_s=1))
    with pytest.raises(TracedbError, match="stopped after 1 s"):
        wh.sql(ENDLESS)
    n = len(rawtrace.tf().kernels)
    assert wh.sql("SELECT count(*) AS n FROM kernels").to_pylist() == [{"n": n}] and n == 755
    # a notebook's "interrupt kernel" is a KeyboardInterrupt in the main thread
    import threading

    main = threading.get_ident()
    import ctypes

    def interrupt():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main), ctypes.py_object(KeyboardInterrupt))

    timer = threading.Timer(1.0, interrupt)
    timer.start()
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        Warehouse(lstm).sql(ENDLESS)
    assert time.monotonic() - t < 3
    assert Warehouse(lstm).sql("SELECT count(*) AS n FROM kernels").to_pylist() == [{"n": n}]


def test_memory_and_temp_limits_hold_and_nothing_spills_into_the_working_folder(lstm, tmp_path, monkeypatch):
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir(), tmp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read $TMPDIR
    # it fits in 50MB of memory by spilling, under 2GiB of temp space
    r = runner.invoke(app, ["query", "-", "-w", str(lstm), "--memory-limit", "50MB", "--temp-limit", "2GiB",
                            "-f", "csv"], input=SPILLS)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == ['"a","n"', "4999999,1"]
    # with 10MB of temp space it cannot: one line naming the limits
    r = runner.invoke(app, ["query", "-", "-w", str(lstm), "--memory-limit", "50MB", "--temp-limit", "10MB"],
                      input=SPILLS)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "Out of Memory Error" in r.output and "(over the temp-space limit: --temp-limit" in r.output
    assert list(work.iterdir()) == [] and list(tmp.iterdir()) == []  # spill folder removed after
    r = runner.invoke(app, ["query", "-", "-w", str(lstm), "--memory-limit", "lots"], input="SELECT 1")
    assert r.exit_code == 2 and "memory limit 'lots' is not a size" in r.output


def test_settings_the_query_runs_with(lstm):
    sql = ("SELECT current_setting('memory_limit') AS m, current_setting('max_temp_directory_size') AS t, "
           "current_setting('temp_directory') AS d")
    got = Warehouse(lstm, limits=QueryLimits(memory_limit="1GiB", temp_limit="3GiB")).sql(sql).to_pylist()[0]
    assert (got["m"], got["t"]) == ("1.0 GiB", "3.0 GiB")
    import tempfile

    assert Path(got["d"]).parent == Path(tempfile.gettempdir()) and Path(got["d"]).name.startswith("tracedb-query-")
    r = runner.invoke(app, ["query", "-", "-w", str(lstm), "-f", "csv"], input=sql)
    m = r.output.splitlines()[1].split(",")
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    gib = float(m[0].strip('"').split()[0]) * (1 << 30 if "GiB" in m[0] else 1 << 20)
    assert abs(gib - total / 2) < 0.02 * total, m  # the CLI's default: half the RAM
    assert m[1].strip('"') == "10.0 GiB"
