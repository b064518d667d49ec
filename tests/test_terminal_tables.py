"""Issue 24 item 7 and issue 28 item 6: tables in a terminal.

Fit the terminal's width ($COLUMNS), cut text in the middle, never print two different
names the same (HTA's fp32 trace has seven `multi_tensor_apply_kernel<...>` kernels that
a 60-character cut printed alike), show `_ns` columns in ms and epoch times as UTC, and
never pass a control character (ANSI/OSC escape sequences) through to the terminal.
CSV keeps values exactly; `--safe-csv` defuses spreadsheet formulas.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

from conftest import scenario
from tracedb import Warehouse
from tracedb import output as out
from tracedb.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def fp32(tmp_path_factory):
    wh = tmp_path_factory.mktemp("terminal") / "wh"
    assert Warehouse(wh).ingest(scenario("kineto_h200_fp32"), run_id="fp32").ok
    return wh


def _raw_kernel_names():
    with gzip.open(scenario("kineto_h200_fp32")) as f:
        events = json.load(f)["traceEvents"]
    return {e["name"] for e in events if e.get("cat") == "kernel"}


def _query(wh, sql, columns, *args):
    r = runner.invoke(app, ["query", "-", "-w", str(wh), *args], input=sql, env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    return r.output


def _body(lines):
    """The table's rows: the lines after the header and rule, up to the notes `(...)`."""
    rows = []
    for ln in lines[2:]:
        if ln.startswith("("):
            break
        rows.append(ln)
    return rows


def _first_column(text):
    lines = text.splitlines()
    width = len(lines[1].split(" ")[0])
    return [ln[:width].rstrip() for ln in _body(lines)]


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_seven_multi_tensor_apply_kernels_print_as_seven(fp32, columns):
    raw = sorted(n for n in _raw_kernel_names() if "multi_tensor_apply_kernel" in n)
    assert len(raw) == 7
    text = _query(fp32, "SELECT DISTINCT name FROM kernels WHERE name LIKE '%multi_tensor_apply%' ORDER BY name",
                  columns)
    assert max(map(len, text.splitlines())) <= columns
    shown = _first_column(text)
    assert len(shown) == 7 and len(set(shown)) == 7, shown
    for cell, name in zip(shown, raw):  # each cut from its own name: head…tail or head…part…tail
        pieces = cell.split("…")
        assert name.startswith(pieces[0]) and name.endswith(pieces[-1]) and all(p in name for p in pieces)


@pytest.mark.parametrize("columns", [80, 200])
def test_top_kernels_fit_the_terminal_and_names_stay_distinct(fp32, columns):
    text = _query(fp32, "SELECT name, count(*) AS n, sum(duration_ns) AS total_ns FROM kernels GROUP BY name "
                        "ORDER BY total_ns DESC, name", columns)
    assert max(map(len, text.splitlines())) <= columns
    assert " | " not in text  # a table, not a row at a time
    names = _first_column(text)
    n = Warehouse(fp32).sql("SELECT count(DISTINCT name) AS n FROM kernels").to_pylist()[0]["n"]
    assert len(names) == n == len(set(names)) and _raw_kernel_names() <= {
        r["name"] for r in Warehouse(fp32).sql("SELECT DISTINCT name FROM kernels").to_pylist()}


def test_runs_fits_100_columns(fp32):
    r = runner.invoke(app, ["runs", "-w", str(fp32)], env={"COLUMNS": "100"})
    assert r.exit_code == 0 and max(map(len, r.output.splitlines())) <= 100, r.output
    assert r.output.splitlines()[2].split()[0] == "fp32"


def test_step_times_in_ms_and_utc_beside_the_exact_ns(tmp_path):
    wh = tmp_path / "wh"
    assert Warehouse(wh).ingest(scenario("tf_stepstats_gpu_streams"), run_id="lstm").ok
    text = runner.invoke(app, ["query", "step_times", "-w", str(wh)], env={"COLUMNS": "200"}).output
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["query", "step_times", "-w", str(wh), "-f", "csv"]).output)))
    assert "start_ns" in rows[0] and "wall_ns" in rows[0]  # the query's own columns are unchanged
    header, _, first = text.splitlines()[:3]
    assert "start_utc" in header and "wall_ms" in header and "start_ns" not in header
    cells = dict(zip(header.split(), first.split()))
    # the oracle: the raw trace's first and last op (TF step stats, µs since the epoch)
    from rawtrace import tf

    nodes = tf().nodes
    first_us = min(n.start for n in nodes) // 1000
    wall = max(n.end for n in nodes) - min(n.start for n in nodes)
    assert cells["start_utc"] == datetime.fromtimestamp(first_us / 1e6, tz=timezone.utc).strftime("%H:%M:%S.%f")
    assert cells["wall_ms"] == f"{wall / 1e6:.3f}".rstrip("0").rstrip(".") and int(rows[0]["wall_ns"]) == wall
    assert max(map(len, text.splitlines())) <= 200


HOSTILE = [
    "\x1b[31mred\x1b[0m", "\x1b]0;owned\x07title", "\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\",
    "\x9b2J", "bell\x07\x08\x7f", "line\nbreak\r", "\u202egnp.exe", "back\\x1b",
]


def _sql_text(text):
    """A SQL expression for `text`, each non-printable character as chr(N)."""
    return " || ".join(f"'{c}'" if c.isprintable() and c.isascii() and c != "'" else f"chr({ord(c)})" for c in text)


@pytest.mark.parametrize("columns", [30, 80])
def test_no_control_character_reaches_the_terminal(tmp_path, columns):
    wh = tmp_path / "wh"
    assert Warehouse(wh).ingest(scenario("tf_stepstats_gpu_streams"), run_id="lstm").ok
    values = ", ".join(f"({i}, {_sql_text(h + 'x' * (i * 7) + h)})" for i, h in enumerate(HOSTILE))
    text = _query(wh, f"SELECT i, name FROM (VALUES {values}) t(i, name) ORDER BY i", columns)
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text), repr(text)
    assert max(map(len, text.splitlines())) <= columns
    if " | " in text:  # a row at a time
        names = [ln.split(" | ", 1)[1] for ln in text.splitlines() if ln.startswith("name ")]
    else:
        lines = text.splitlines()
        start = lines[1].index("-", len(lines[1].split(" ")[0]) + 1)
        names = [ln[start:].rstrip() for ln in _body(lines)]
    assert len(names) == len(set(names)) == len(HOSTILE), names
    header = _query(wh, 'SELECT 1 AS "na\x1b[2Jme\x07"', columns)
    assert "\x1b" not in header and "\x07" not in header and "na\\x1b[2Jme\\x07" in header
    if columns == 80:
        assert names[0] == "\\x1b[31mred\\x1b[0m\\x1b[31mred\\x1b[0m" and names[6].startswith("\\u202egnp.exe")


def test_visible_is_one_to_one():
    texts = ["\x1b", "\\x1b", "\\", "\\\\", "\n", "\\n", "a\u202eb", "a\\u202eb", "\x9b", "plain ✓"]
    shown = [out.visible(t) for t in texts]
    assert len(set(shown)) == len(texts)
    assert out.visible("plain ✓") == "plain ✓"


def test_csv_keeps_formulas_and_safe_csv_defuses_them(tmp_path):
    wh = tmp_path / "wh"
    assert Warehouse(wh).ingest(scenario("tf_stepstats_gpu_streams"), run_id="lstm").ok
    sql = ("SELECT * FROM (VALUES ('=cmd|'' /c calc''!A1', -1.5, 1), ('+1+1', 2.0, 2), ('-2', 3.0, 3), "
           "('@SUM(A1)', 4.0, 4), ('plain', 5.0, 5), (chr(9) || '=x', 6.0, 6)) t(\"=name\", v, i)")
    for fmt_args, arrow in ((["-f", "csv"], False), (["-f", "csv", "--safe-csv"], False)):
        r = runner.invoke(app, ["query", "-", "-w", str(wh), *fmt_args], input=sql)
        assert r.exit_code == 0, r.output
        rows = list(csv.reader(io.StringIO(r.output)))
        if "--safe-csv" in fmt_args:
            assert rows[0] == ["'=name", "v", "i"]
            assert [x[0] for x in rows[1:]] == ["'=cmd|' /c calc'!A1", "'+1+1", "'-2", "'@SUM(A1)", "plain", "'\t=x"]
            assert [x[1] for x in rows[1:]] == ["-1.5", "2", "3", "4", "5", "6"]  # numbers stay numbers
        else:
            assert rows[0] == ["=name", "v", "i"]
            assert [x[0] for x in rows[1:]] == ["=cmd|' /c calc'!A1", "+1+1", "-2", "@SUM(A1)", "plain", "\t=x"]
    # the Arrow path (a timestamp column forces it) writes the same bytes
    t = Warehouse(wh).sql(sql + " , (SELECT now()::TIMESTAMP AS ts)")
    buf_rows, buf_arrow = io.StringIO(), io.StringIO()
    out.write(Warehouse(wh).sql(sql, output="rows"), "csv", stream=buf_rows, safe_csv=True)
    out.write(t.drop_columns(["ts"]), "csv", stream=buf_arrow, safe_csv=True)
    assert buf_rows.getvalue() == buf_arrow.getvalue()
