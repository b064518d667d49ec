"""The canned SQL library as a whole: headers, parameters, portability, and the CLI."""

from __future__ import annotations

import csv
import io
import logging
import re

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from tracedb import dialects
from tracedb import query as q
from tracedb import sqllib
from tracedb.cli import app
from tracedb.errors import TracedbError
from tracedb.resources import sql_dir

QUERIES = sqllib.list_queries()
NAMES = [c.name for c in QUERIES]
# Runs given to required VARCHAR parameters, in header order (baseline/candidate, run_a/run_b).
REQUIRED_RUNS = ["tf_runmetadata_text", "tf_stepstats_gpu_streams"]
# Queries with nothing to report on the seed traces (they hold no communication kernels).
EMPTY_ON_SEED = {"collectives", "comm_comp_overlap", "nccl_bandwidth", "stragglers",  # no communication kernels or ranks on the seed traces
                 "tensor_flow"}  # no execution trace among them (tests/test_format_chakra_et.py runs it)

runner = CliRunner()


# The canned queries users call by name (scripts, dashboards, the README): written out, not
# listed from sql/, so a query removed, renamed or lost from the listing fails here.
SHIPPED = {
    "collectives", "comm_comp_overlap", "compare_runs", "fleet_trend", "flops_unknown_ops", "gpu_busy_idle",
    "graph_diff", "idle_time_breakdown", "kernel_duration_histogram", "kernel_launch_config",
    "kernel_launch_stats", "kernel_steps", "kernel_summary", "kernel_type_breakdown", "largest_tensors",
    "launch_delay", "megengine_op_types", "megengine_top_operators", "memcpy_summary", "memory_bandwidth",
    "memory_timeline", "mfu", "nccl_bandwidth", "op_flops", "op_kernel_map", "op_type_time", "peak_memory",
    "queue_length", "roofline", "step_times", "stragglers", "stream_overlap", "temporal_breakdown",
    "tensor_flow", "top_kernels", "top_ops",
}


def test_library_is_complete():
    """Each shipped query is in the library, and every `.sql` file of the source tree's
    sql/ folder (listed here with os.listdir, not through tracedb) is a query under its
    file name: in the API's listing, in `tracedb queries` and in docs/queries.md."""
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = sorted(f[:-len(".sql")] for f in os.listdir(root / "sql") if f.endswith(".sql"))
    assert SHIPPED <= set(files)
    assert NAMES == files  # tracedb's listing, sorted by name
    import tracedb

    assert [cq.name for cq in tracedb.Warehouse(root / "no-warehouse").queries()] == files
    listed = [line.split(":")[0] for line in runner.invoke(app, ["queries"]).output.splitlines()
              if line and not line.startswith(" ")]
    assert listed == files
    documented = re.findall(r"^## `([a-z0-9_]+)`", (root / "docs" / "queries.md").read_text(), flags=re.M)
    assert documented == files


@pytest.mark.parametrize("cq", QUERIES, ids=NAMES)
def test_header_and_params(cq):
    assert cq.has_header and cq.title and cq.description, cq.name
    assert len(cq.description) > 40 and "\n" not in cq.description
    names = [p.name for p in cq.params]
    assert len(names) == len(set(names))
    assert set(names) == sqllib.placeholders(cq.sql), f"{cq.name}: header params != placeholders"
    for p in cq.params:
        assert p.description, f"{cq.name}: param {p.name} has no description"
    if any(p.name == "run_id" for p in cq.params):
        p = cq.param("run_id")
        assert (p.type, p.default, p.required) == ("VARCHAR", None, False)


@pytest.mark.parametrize("cq", QUERIES, ids=NAMES)
@pytest.mark.parametrize("dialect", ["spark", "trino"])
def test_transpiles_without_error_or_warning(cq, dialect, caplog):
    with caplog.at_level(logging.DEBUG, logger="sqlglot"):
        out = dialects.transpile(cq, dialect)
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("sqlglot") and r.levelno >= logging.WARNING]
    assert warnings == [], f"{cq.name} -> {dialect}: {warnings}"
    assert out.startswith(f"-- title: {cq.title}\n")
    # placeholders rewritten ('$.key' JSON paths are no placeholders)
    assert not re.search(r"\$[A-Za-z_]", out.split("\n", len(cq.params) + 2)[-1])


def required_params(cq):
    runs = iter(REQUIRED_RUNS)
    return {p.name: next(runs) for p in cq.params if p.required}


@pytest.mark.parametrize("cq", QUERIES, ids=NAMES)
def test_runs_on_seed_warehouse(cq, seed_warehouse):
    table = q.run_query(cq, required_params(cq), seed_warehouse)
    if cq.name not in EMPTY_ON_SEED:
        assert table.num_rows > 0, cq.name
    # sums of integer ns and bytes stay BIGINT: no HUGEINT (decimal in Arrow) leaks out
    for field in table.schema:
        assert not pa.types.is_decimal(field.type), (cq.name, field.name, field.type)
        if field.name in ("total_ns", "total_bytes", "busy_ns", "gpu_kernel_ns", "peak_bytes"):
            assert field.type == pa.int64(), (cq.name, field.name, field.type)


def test_queries_command_lists_all():
    result = runner.invoke(app, ["queries"])
    assert result.exit_code == 0, result.output
    listed = re.findall(r"^(\w+): ", result.output, flags=re.M)
    assert listed == NAMES
    # plain type names (not `<VARCHAR>` or `<BIGINT>=0>`), the bound spelled out
    assert "--param baseline=VALUE" in result.output and "(VARCHAR; required)" in result.output
    assert "--param limit=VALUE  Rows to return (BIGINT >= 0; default 50)" in result.output
    assert "<" not in result.output.replace("<=", "")


@pytest.mark.parametrize("params,message", [
    ({"nope": "1"}, r"kernel_summary: unknown parameter\(s\) nope; it takes: device, kind, limit, run_id"),
    ({"limit": "ten"}, r"parameter limit must be BIGINT, got 'ten'"),
    ({"bucket_ns": "1.5"}, r"parameter bucket_ns must be BIGINT"),
])
def test_bad_params_are_clear_errors(params, message):
    name = "kernel_duration_histogram" if "bucket_ns" in params else "kernel_summary"
    with pytest.raises(TracedbError, match=message):
        sqllib.bind(sqllib.load(name), params)


def test_missing_required_param():
    with pytest.raises(TracedbError, match="compare_runs: missing required parameter candidate"):
        sqllib.bind(sqllib.load("compare_runs"), {"baseline": "a"})


def test_cli_param_errors_exit_2_without_output(seed_warehouse):
    for args, message in [
        (["compare_runs", "-p", "baseline=x"], "missing required parameter candidate"),
        (["top_ops", "-p", "limit=lots"], "parameter limit must be BIGINT"),
        (["top_ops", "-p", "run=x"], "unknown parameter(s) run"),
        (["top_ops", "-p", "limit"], "expected name=value"),
    ]:
        result = runner.invoke(app, ["query", *args, "-w", str(seed_warehouse)])
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert result.output.count("\n") == 1  # one line, no traceback, no table


def test_cli_runs_a_query_with_params(seed_warehouse):
    result = runner.invoke(app, ["query", "memcpy_summary", "-p", "run_id=tf_stepstats_gpu_streams",
                                 "--format", "csv", "-w", str(seed_warehouse)])
    assert result.exit_code == 0, result.output
    header, *body = csv.reader(io.StringIO(result.output))
    assert header[:7] == ["run_id", "device", "kind", "copy_kind", "operations", "total_bytes", "total_ns"]
    assert [(r[3], r[4]) for r in body] == [("DtoD", "7"), ("DtoH", "8"), ("HtoD", "11")]


@pytest.mark.parametrize("dialect", ["trino", "spark"])
def test_cli_dialect_prints_transpiled_sql(dialect, tmp_path):
    # Needs no warehouse: it prints instead of running.
    result = runner.invoke(app, ["query", "stream_overlap", "--dialect", dialect, "-w", str(tmp_path / "none")])
    assert result.exit_code == 0, result.output
    assert result.output == dialects.transpile(sqllib.load("stream_overlap"), dialect)
    assert result.output.startswith("-- title: Stream overlap\n")
    # the window of the metric's definition, inlined from sql/metrics/ (`-- include:`)
    assert "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING" in result.output
    # no values to choose by: the metric from raw rows, right for any values (--inline: its rollup)
    assert "include:" not in result.output and "rollup_stream_overlap" not in result.output
    inlined = runner.invoke(app, ["query", "stream_overlap", "--dialect", dialect, "--inline", "-w", str(tmp_path / "none")])
    assert "rollup_stream_overlap" in inlined.output and "PRECEDING" not in inlined.output
    assert "$run_id" not in result.output


def test_cli_unknown_dialect():
    result = runner.invoke(app, ["query", "top_ops", "--dialect", "cobol"])
    assert result.exit_code == 2 and "unknown dialect 'cobol'" in result.output


# DuckDB constructs sqlglot passes through without a warning although the target engine
# has no such function: each was once in a canned query.
_PASSED_THROUGH = {
    "trino": [r"\bARBITRARY\([^)]*ORDER BY", r"\bFIRST\(", r"\bERROR\(", r"\bPERCENTILE_CONT\("],
    "spark": [r"\bFIRST\([^)]*ORDER BY", r"\bERROR\("],
}


@pytest.mark.parametrize("dialect", sorted(_PASSED_THROUGH))
def test_no_duckdb_only_functions_survive_transpiling(dialect):
    for cq in sqllib.list_queries():
        sql = re.sub(r"/\*.*?\*/|--[^\n]*", "", dialects.transpile(cq, dialect), flags=re.S)
        for pattern in _PASSED_THROUGH[dialect]:
            assert not re.search(pattern, sql, re.I), (cq.name, dialect, pattern)


def test_choice_parameters_are_checked():
    cq = sqllib.load("megengine_op_types")
    assert cq.param("order_by").choices == ("time", "flops", "memory")
    assert sqllib.bind(cq, {"order_by": "FLOPS"})["order_by"] == "FLOPS"  # case-insensitive
    with pytest.raises(TracedbError, match="order_by must be time, flops or memory, got 'name'"):
        sqllib.bind(cq, {"order_by": "name"})


def test_includes_nest_and_a_cycle_is_a_clear_error(tmp_path, monkeypatch):
    """`-- include:` expands a library file's own includes (the interval queries include
    metrics that include others), and a file that includes itself, directly or through
    another, is refused with the chain named instead of recursing."""
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "inner.sql").write_text("-- title: inner\nSELECT 42 AS answer\n")
    (tmp_path / "metrics" / "outer.sql").write_text("-- title: outer\n-- include: metrics/inner.sql\n")
    (tmp_path / "metrics" / "a.sql").write_text("-- include: metrics/b.sql\n")
    (tmp_path / "metrics" / "b.sql").write_text("-- include: metrics/a.sql\n")
    monkeypatch.setattr(sqllib, "sql_dir", lambda: tmp_path)
    assert sqllib.expand_includes("WITH x AS (\n-- include: metrics/outer.sql\n) SELECT * FROM x", "mine.sql") == (
        "WITH x AS (\nSELECT 42 AS answer\n) SELECT * FROM x")
    with pytest.raises(TracedbError, match=r"mine.sql: include 'metrics/a.sql' includes itself "
                                           r"\(metrics/a.sql -> metrics/b.sql -> metrics/a.sql\)"):
        sqllib.expand_includes("-- include: metrics/a.sql", "mine.sql")
    with pytest.raises(TracedbError, match="no such file in the SQL library"):
        sqllib.expand_includes("-- include: metrics/missing.sql", "mine.sql")
