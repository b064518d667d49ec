"""`tracedb query NAME --dialect X`: SQL that the engine runs as printed.

Every canned query, for every engine we name, with placeholders (the engine's own syntax)
and with parameters inlined, parses back with sqlglot in that dialect; values survive the
round trip exactly however they are quoted; DuckDB runs the inlined SQL to the same rows
as the bound query.
"""

from __future__ import annotations

import logging
import re

import pytest
import sqlglot
from sqlglot import exp
from typer.testing import CliRunner

from tracedb import catalog
from tracedb import dialects
from tracedb import query as q
from tracedb import sqllib
from tracedb.cli import app

QUERIES = sqllib.list_queries()
NAMES = [c.name for c in QUERIES]
ENGINES = ["spark", "trino", "clickhouse", "postgres", "bigquery", "snowflake"]
REQUIRED_RUNS = ["tf_runmetadata_text", "tf_stepstats_gpu_streams"]
# A value that breaks out of any naive quoting: quotes, backslashes, a comment, a statement.
NASTY = "x'\\'); DROP TABLE runs; -- \\\\ \"q\" `b` $run_id :run_id @run_id {run_id:String}"

runner = CliRunner()


def required(cq):
    runs = iter(REQUIRED_RUNS)
    return {p.name: next(runs) for p in cq.params if p.required}


def parse_back(sql: str, dialect: str) -> list[exp.Expression]:
    trees = sqlglot.parse(sql, read=dialect, error_level=sqlglot.ErrorLevel.RAISE)
    assert len(trees) == 1 and isinstance(trees[0], exp.Query), sql
    return trees


def markers(tree: exp.Expression) -> list[exp.Expression]:
    return list(tree.find_all(exp.Placeholder, exp.Parameter))


@pytest.mark.parametrize("dialect", ENGINES)
@pytest.mark.parametrize("cq", QUERIES, ids=NAMES)
def test_placeholders_parse_back_in_the_engines_syntax(cq, dialect, caplog):
    with caplog.at_level(logging.WARNING, logger="sqlglot"):
        out = dialects.transpile(cq, dialect)
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")], caplog.text
    (tree,) = parse_back(out, dialect)
    found = markers(tree)
    names = {p.name for p in cq.params}
    if dialect == "trino":  # positional: the header lists each ? in order
        note = next(ln for ln in out.splitlines() if ln.startswith("-- placeholders, each ? in order: "))
        listed = note.split(": ", 1)[1].split(", ")
        assert len(found) == len(listed) and set(listed) == names
        assert all(isinstance(m, exp.Placeholder) and m.this is None for m in found)
    elif dialect in ("postgres", "snowflake"):  # numbered in header order, each number reused
        numbers = {int(m.name) for m in found}
        assert numbers == set(range(1, len(names) + 1))
        mark = dialects.NUMBERED[dialect]
        assert f"-- placeholders: {', '.join(f'{mark}{i} {p.name}' for i, p in enumerate(cq.params, 1))}" in out
    else:  # named
        assert {m.name for m in found} == names
        if dialect == "clickhouse":  # typed query parameters; NULL defaults are Nullable
            for m in found:
                p = cq.param(m.name)
                assert m.args["kind"].args.get("nullable") == (p.default is None and not p.required), (m.name, out)


@pytest.mark.parametrize("dialect", ENGINES)
@pytest.mark.parametrize("cq", QUERIES, ids=NAMES)
def test_inlined_parameters_parse_back_with_no_placeholder(cq, dialect):
    out = dialects.transpile(cq, dialect, required(cq))
    (tree,) = parse_back(out, dialect)
    assert markers(tree) == []
    for run in required(cq).values():
        assert run in [s.this for s in tree.find_all(exp.Literal) if s.is_string]


@pytest.mark.parametrize("dialect", ENGINES + ["duckdb", "databricks"])
def test_values_are_quoted_safely(dialect):
    cq = sqllib.load("top_ops")
    out = dialects.transpile(cq, dialect, {"run_id": NASTY, "device": "GPU:0", "limit": "7"})
    (tree,) = parse_back(out, dialect)
    strings = [s.this for s in tree.find_all(exp.Literal) if s.is_string]
    assert strings.count(NASTY) == 2 and strings.count("GPU:0") == 2
    assert tree.args["limit"].expression.this == "7"
    assert not list(tree.find_all(exp.Drop)) and markers(tree) == []


def test_null_and_typed_values():
    cq = sqllib.load("kernel_duration_histogram")
    out = dialects.transpile(cq, "trino", {"bucket_ns": "1000"})
    assert "-- inlined: run_id=NULL, device=NULL, kind='kernel', bucket_ns=1000" in out
    (tree,) = parse_back(out, "trino")
    casts = {c.to.sql("trino") for c in tree.find_all(exp.Cast) if isinstance(c.this, exp.Null)}
    assert casts == {"VARCHAR"}  # run_id and device: typed NULLs; bucket_ns a number
    assert "1000" in [n.this for n in tree.find_all(exp.Literal) if not n.is_string]


def test_window_null_order_spelled_out_for_bigquery():
    out = dialects.transpile(sqllib.load("stream_overlap"), "bigquery")  # its windows: the included metric's
    assert not re.search(r"OVER \([^)]*NULLS", out)  # BigQuery has none inside a window
    assert "ORDER BY CASE WHEN start_ns IS NULL THEN 1 ELSE 0 END ASC, start_ns," in out


def test_cte_materialization_hint_kept_only_where_the_engine_has_it():
    cq = sqllib.load("collectives")  # `k AS NOT MATERIALIZED`: scanned per use, never held whole
    assert "AS NOT MATERIALIZED" in cq.sql
    for dialect in ENGINES:
        out = dialects.transpile(cq, dialect)
        assert ("MATERIALIZED" in out) == (dialect == "postgres"), dialect
        assert "k AS (" in out or dialect == "postgres", dialect


def test_inlined_duckdb_sql_gives_the_bound_querys_rows(seed_warehouse):
    con = catalog.connect(seed_warehouse)
    try:
        for cq in QUERIES:
            params = required(cq)
            bound = q.execute(con, cq, sqllib.bind(cq, params))
            inlined = q.execute(con, sqllib.parse(dialects.transpile(cq, "duckdb", params), cq.name), {})
            assert inlined.equals(bound), cq.name
    finally:
        con.close()


def test_cli_param_inlines_and_placeholders_stay_without(tmp_path):
    wh = ["-w", str(tmp_path / "none")]  # printing needs no warehouse
    r = runner.invoke(app, ["query", "top_kernels", "--dialect", "bigquery", *wh])
    assert r.exit_code == 0 and "@run_id IS NULL" in r.output and "LIMIT @limit" in r.output
    r = runner.invoke(app, ["query", "top_kernels", "--dialect", "bigquery", "-p", "run_id=o'neil", *wh])
    assert r.exit_code == 0, r.output
    assert "run_id = 'o\\'neil'" in r.output and "LIMIT 50" in r.output and "@" not in r.output
    r = runner.invoke(app, ["query", "top_kernels", "--dialect", "spark", "--inline", *wh])
    assert r.exit_code == 0 and "CAST(NULL AS STRING) IS NULL" in r.output and "LIMIT 50" in r.output
    r = runner.invoke(app, ["query", "compare_runs", "--dialect", "spark", "-p", "baseline=a", *wh])
    assert r.exit_code == 2 and "missing required parameter candidate" in r.output
    r = runner.invoke(app, ["query", "top_kernels", "--dialect", "trino", "-p", "limit=-1", *wh])
    assert r.exit_code == 2 and "limit must be >=0" in r.output
