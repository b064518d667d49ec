"""Each metric with a rollup is declared once, in its own header (`tracedb.sqllib`): the
rollup writer, the schema's rollup tables and the canned queries all follow it, and the
rollup gives the rows the metric's SQL gives from raw rows, for every parameter value the
header says it serves, on every fixture.

The oracle of the property test is the metric's own SQL run on the raw rows of the same
warehouse (the definition); the rollup is what the ingest stored. The figures themselves
are checked against the raw traces in the test files of each query (tests/test_queries_*.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from tracedb import catalog, rollups, schema, snapshot, sqllib
from tracedb.errors import TracedbError
from tracedb.output import plain_numbers

DATA = Path(__file__).parent / "data"
METRICS = {m.name: m for m in sqllib.list_metrics() if m.rollup}
# Traces beyond the seed warehouse's: collectives on one and two ranks, ROCm, Triton,
# step markers, an MTIA inference, host-only ops, an execution trace beside its Kineto trace.
VARIED = ["hta_nccl_allreduce", "hta_nccl_two_ranks", "hta_rocm_mi250", "hta_triton", "kineto_h200_annotated",
          "hta_mtia_inference", "hta_cpu_only", "chakra_mlp_h100"]


@pytest.fixture(scope="module")
def varied(tmp_path_factory) -> Path:
    from tracedb.ingest import ingest

    wh = tmp_path_factory.mktemp("varied") / "wh"
    for name in VARIED:
        assert ingest([DATA / name], wh, run_id=name).ok, name
    return wh


def test_every_rollup_table_is_declared_by_its_metric():
    """The schema's rollup tables (which the snapshot lists too) are exactly those the
    metrics' headers declare, and the writer runs each table's metric."""
    stored = sqllib.stored_rollups()
    assert set(stored) == set(schema.ROLLUP_TABLES) == {t for t in snapshot.TABLES if t.startswith("rollup_")}
    assert {t: m.name for t, m in rollups.metrics().items()} == {t: t.removeprefix("rollup_") for t in stored}
    for m in METRICS.values():  # a metric may read a wider metric's table (idle_gaps: stream_time's)
        assert m.rollup.table in stored, m.name


def _empty_sources() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table, sch in {**schema.SOURCE_TABLES, "runs": schema.RUNS}.items():
        cols = ", ".join(f'CAST(NULL AS {schema.duckdb_type(f.type)}) AS "{f.name}"' for f in sch)
        con.execute(f"CREATE TABLE {table} AS SELECT {cols} WHERE false")
    return con


@pytest.mark.parametrize("name", sorted(METRICS))
def test_declared_columns_and_reads_are_the_metrics(name):
    """`-- columns:` are the metric's output columns, in order, and its rollup table's;
    the table's others are only those the writer adds (kind, a constant device); `-- reads:`
    are the source tables the SQL reads, `-- needs:` some of them, and the writer loads each."""
    m = METRICS[name]
    con = _empty_sources()
    got = [d[0] for d in con.execute(m.sql, sqllib.bind(m, {}, con)).description]
    assert tuple(got) == m.rollup.columns
    table = schema.ROLLUP_TABLES[m.rollup.table].names
    assert set(m.rollup.columns) <= set(table)
    if m.rollup.table == f"rollup_{name}":
        extra = set(table) - set(m.rollup.columns)
        assert extra <= {"kind", "device"} and ("kind" in extra) == (m.param("kind") is not None), extra
    body = "\n".join(ln.split("--")[0] for ln in m.sql.splitlines())
    named = {t for t in re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", body, re.IGNORECASE) if t in schema.SOURCE_TABLES}
    assert set(m.reads) == named
    assert {t for alts in m.needs for t in alts} <= set(m.reads)
    assert set(m.reads) <= set(rollups.WHOLE_SOURCES)


def test_needs_apart_from_reads():
    """step_times reads the step markers but has no row without nodes or kernels: a run
    with only `steps` rows does not run it; kernel_launches needs both of its tables."""
    assert METRICS["step_times"].reads == ("nodes", "kernels", "steps")
    assert not rollups.has_inputs("rollup_step_times", {"steps"})
    assert rollups.has_inputs("rollup_step_times", {"nodes"}) and rollups.has_inputs("rollup_step_times", {"kernels"})
    assert not rollups.has_inputs("rollup_kernel_launches", {"kernels"})
    assert rollups.has_inputs("rollup_kernel_launches", {"kernels", "runtime_calls"})


def test_canned_queries_read_rollups_only_through_metrics():
    """No canned query names a rollup table or decides rollup-or-raw itself: each includes
    the metric, and the SQL library decides (`CannedQuery.sql_for`)."""
    for path in sorted(sqllib.sql_dir().glob("*.sql")):
        code = "\n".join(ln.split("--")[0] for ln in path.read_text().splitlines())
        assert "rollup_" not in code, path.name
    assert "30000" not in (sqllib.sql_dir() / "idle_time_breakdown.sql").read_text()  # the metric's default alone


def test_header_errors_are_clear():
    def parse(header: str):
        return sqllib.parse(f"-- title: t\n-- param: run_id VARCHAR NULL r\n{header}\nSELECT $run_id", "mine", Path("mine.sql"))

    with pytest.raises(TracedbError, match=r"^mine.sql: `-- raw-if:` is gone"):
        parse("-- raw-if: run_id")
    with pytest.raises(TracedbError, match="lists its output columns"):
        parse("-- rollup: rollup_x")
    with pytest.raises(TracedbError, match="name nope, not a parameter of the metric"):
        parse("-- rollup: rollup_x\n-- columns: a\n-- rollup-filter: nope")
    with pytest.raises(TracedbError, match="without a `-- rollup:` table"):
        parse("-- columns: a")
    with pytest.raises(TracedbError, match="parameter kernel_wait_ns is BIGINT 1000 here but BIGINT>=0 30000 in the metric idle_gaps"):
        sqllib.parse("-- title: t\n-- param: kernel_wait_ns BIGINT 1000 k\n"
                     "WITH g AS (\n-- include: metrics/idle_gaps.sql\n) SELECT * FROM g", "mine", Path("mine.sql"))


def test_a_query_takes_its_metrics_parameters():
    """A canned query that declares none of its metric's parameters has them, in the
    metric's order, with the metric's defaults: idle_time_breakdown's 30 us threshold."""
    cq = sqllib.load("idle_time_breakdown")
    assert [p.name for p in cq.params] == ["run_id", "rank", "step_from", "step_to", "kernel_wait_ns"]
    assert cq.param("kernel_wait_ns").default == 30000
    assert "rollup_stream_time" in cq.sql_for(sqllib.bind(cq, {"kernel_wait_ns": 30000, "rank": 0}))
    for given in ({"kernel_wait_ns": 1000}, {"kernel_wait_ns": None}, {"step_to": 3}):
        assert "rollup_" not in cq.sql_for(sqllib.bind(cq, given)), given


def _values(con, m) -> list[dict]:
    """Parameter values to try: the defaults; each served parameter alone at every value
    the warehouse holds (steps: the first, a middle, the last and one past it); each run
    with each of them at one value."""
    served = sorted(m.rollup.serves)
    domain: dict[str, list] = {}
    if "run_id" in served:
        domain["run_id"] = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY 1").fetchall()]
    if "device" in served:
        domain["device"] = [d for (d,) in con.execute("SELECT DISTINCT device FROM kernels ORDER BY 1").fetchall()]
    if "rank" in served:
        domain["rank"] = [r for (r,) in con.execute("SELECT DISTINCT rank FROM kernels WHERE rank IS NOT NULL ORDER BY 1").fetchall()]
    if "kind" in served:
        domain["kind"] = ["kernel", "memcpy", "memset"]
    steps = [s for (s,) in con.execute("SELECT DISTINCT step FROM kernels WHERE step IS NOT NULL ORDER BY 1").fetchall()]
    picks = sorted({steps[0], steps[len(steps) // 2], steps[-1], steps[-1] + 1}) if steps else [1]
    for p in ("step_from", "step_to"):
        if p in served:
            domain[p] = picks
    out = [{}] + [{p: v} for p, vs in domain.items() for v in vs]
    if {"step_from", "step_to"} <= set(served):
        out += [{"step_from": s, "step_to": s} for s in picks]
    for run in domain.get("run_id", []):
        out += [{"run_id": run}] + [{"run_id": run, p: vs[len(vs) // 2]} for p, vs in domain.items() if p != "run_id" and vs]
    return out


def _rows(con, sql: str, values: dict) -> list[tuple]:
    names = sqllib.bound_names(sql, con)
    table = plain_numbers(con.sql(sql, params={k: v for k, v in values.items() if k in names} or None).to_arrow_table())
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


@pytest.mark.parametrize("where", ["seed", "varied"])
@pytest.mark.parametrize("name", sorted(METRICS))
def test_rollup_gives_the_metrics_rows(name, where, seed_warehouse, varied):
    """The property: for every value the header says the rollup serves, its rows are the
    metric's SQL on the raw rows, exactly (values, and how many of each)."""
    m = METRICS[name]
    con = catalog.connect(seed_warehouse if where == "seed" else varied)
    try:
        seen = 0
        for values in _values(con, m):
            values = sqllib.bind(m, values)
            assert m.served(values), values
            assert m.sql_for(values) == m.rollup.select()
            want = _rows(con, m.sql, values)
            assert _rows(con, m.rollup.select(), values) == want, values
            seen += bool(want)
        # real rows were compared (the seed warehouse has no collectives; run_summary serves
        # no parameter: its one set of values is every run at once)
        assert seen >= (0 if where == "seed" and name in ("collectives", "nccl_bandwidth")
                        else 1 if not m.rollup.serves else 3)
    finally:
        con.close()
