"""`tracedb ddl --engine E`: every statement parses back with sqlglot in that engine's
dialect, defines each lake table at its location with the schema module's columns,
partitions and comments, and the views keep each run's live ingest only."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType
from typer.testing import CliRunner

from tracedb import ddl, schema
from tracedb.cli import app
from tracedb.errors import TracedbError

LOCATION = "s3://traces/team's lake"  # a quote inside: must stay one literal
TABLES = ["runs", *schema.TABLES, "files", "ingest_log"]  # not checksums: internal
runner = CliRunner()


def statements(engine: str, location: str = LOCATION) -> list[exp.Expression]:
    return ddl.parse_script(ddl.ddl(engine, location), engine)


def strings(tree: exp.Expression) -> list[str]:
    return [s.this for s in tree.find_all(exp.Literal) if s.is_string]


def views(trees, engine):
    return {t.this.name: t for t in trees if isinstance(t, exp.Create) and t.kind == "VIEW"
            and t.this.db == "tracedb"}


@pytest.mark.parametrize("engine", ddl.ENGINES)
def test_views_keep_the_live_ingest_and_the_schemas_columns(engine):
    trees = statements(engine)
    v = views(trees, engine)
    assert set(v) == set(TABLES)
    for table in TABLES:
        select = v[table].expression
        assert select.args["from_"].this.db == "tracedb_lake" and select.args["from_"].this.name == table
        if table in schema.VIEWS:
            assert select.named_selects == schema.VIEWS[table].names
        where = select.args.get("where")
        if table in schema.TABLES:
            cond = where.this
            assert isinstance(cond, exp.In) and [c.name for c in cond.this.expressions] == ["run_id", "ingest_id"]
            sub = cond.args["query"].this
            assert sub.named_selects == ["run_id", "ingest_id"] and sub.args["from_"].this.name == "runs"
        else:
            assert where is None, table


@pytest.mark.parametrize("engine", ["spark", "databricks"])
def test_spark_defines_delta_tables_with_columns_partitions_comments(engine):
    trees = statements(engine)
    tables = {t.this.this.name: t for t in trees if isinstance(t, exp.Create) and t.kind == "TABLE"}
    assert set(tables) == set(TABLES)
    for table, t in tables.items():
        props = {type(p).__name__: p for p in t.args["properties"].expressions}
        assert props["FileFormatProperty"].name.upper() == "DELTA"
        assert props["LocationProperty"].this.this == f"{LOCATION}/{table}"
        cols = t.this.expressions
        sch = ddl.lake_schema(table)
        assert [c.name for c in cols] == sch.names and "ingest_id" in sch.names
        for c, f in zip(cols, sch):
            comment = c.find(exp.CommentColumnConstraint)
            assert comment.this.this == f.metadata[b"doc"].decode(), (table, c.name)
        assert "PartitionedByProperty" not in props  # schema 8: no table is partitioned (files of many runs)
    kernels = tables["kernels"].this.expressions
    types = {c.name: c.args["kind"].sql(engine) for c in kernels}
    assert (types["grid"], types["occupancy"], types["rank"], types["run_id"]) == ("ARRAY<BIGINT>", "DOUBLE", "INT", "STRING")
    assert {c.name: c.args["kind"].sql(engine) for c in tables["runs"].this.expressions}["started_at"] == "TIMESTAMP"


def test_trino_registers_each_table_and_comments_the_views():
    script = ddl.ddl("trino", LOCATION, catalog="lake")
    trees = ddl.parse_script(script, "trino")
    calls = [t for t in trees if isinstance(t, exp.Command)]
    assert len(calls) == len(TABLES)
    tokenizer = sqlglot.Dialect.get_or_raise("trino").tokenizer_class()
    for table, call in zip(TABLES, calls):  # sqlglot keeps CALL as text: check its tokens
        assert call.this == "CALL"
        toks = tokenizer.tokenize(call.expression.this)  # the text after CALL
        assert "".join(t.text for t in toks[:6]) == "lake.system.register_table("
        assert [t.text for t in toks if t.token_type == TokenType.STRING] == ["tracedb_lake", table, f"{LOCATION}/{table}"]
    comments = {(t.this.sql("trino"), t.expression.this) for t in trees if isinstance(t, exp.Comment) and t.args["kind"] == "COLUMN"}
    assert ("lake.tracedb.kernels.duration_ns", "duration, ns") in comments
    assert ('lake.tracedb.runs."commit"', "label from run.json") in comments
    assert len(comments) == sum(len(schema.VIEWS[t]) for t in schema.VIEWS)


def test_duckdb_reads_the_delta_log_with_delta_scan():
    trees = statements("duckdb")
    scans = {t.this.name: strings(t) for t in trees
             if isinstance(t, exp.Create) and t.kind == "VIEW" and t.this.db == "tracedb_lake"}
    assert scans == {t: [f"{LOCATION}/{t}"] for t in TABLES}
    assert [t.sql("duckdb", comments=False) for t in trees[:2]] == ["INSTALL delta", "LOAD delta"]


def test_cli_ddl_defaults_to_the_warehouse_path(tmp_path):
    r = runner.invoke(app, ["ddl", "--engine", "spark", "-w", str(tmp_path / "wh")])
    assert r.exit_code == 0, r.output
    assert f"LOCATION '{(tmp_path / 'wh').resolve().as_posix()}/kernels'" in r.output
    r = runner.invoke(app, ["ddl", "--engine", "trino", "--location", "s3://b/wh/", "--schema", "perf"])
    assert r.exit_code == 0 and "table_location => 's3://b/wh/kernels'" in r.output
    assert "CREATE OR REPLACE VIEW delta.perf.kernels AS" in r.output
    r = runner.invoke(app, ["ddl", "--engine", "oracle"])
    assert r.exit_code == 2 and "unknown engine 'oracle'" in r.output


def test_warehouse_ddl_is_the_commands(tmp_path):
    """`tracedb ddl` is a thin call to `Warehouse.ddl` (the library can do what the CLI can)."""
    import tracedb

    r = runner.invoke(app, ["ddl", "--engine", "spark", "-w", str(tmp_path / "wh")])
    assert r.exit_code == 0 and r.output == tracedb.Warehouse(tmp_path / "wh").ddl("spark")
    assert "table_location => 's3://b/wh/kernels'" in tracedb.Warehouse("s3://b/wh").ddl("trino")


def test_a_line_break_cannot_escape_into_the_script():
    with pytest.raises(TracedbError, match="line break"):
        ddl.ddl("spark", "s3://b/wh\nDROP TABLE x")
