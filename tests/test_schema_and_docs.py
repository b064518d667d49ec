"""The schema is code: docs are generated from it, and the contract's columns exist."""

from __future__ import annotations

import re

import pyarrow as pa

from tracedb import docs, schema


def test_generated_docs_are_in_sync():
    for name, text in docs.generated().items():
        assert (docs.DOCS / name).read_text() == text, f"docs/{name} is stale: run python -m tracedb.docs"


def test_contract_columns_present_with_contract_units():
    for view, cols in schema.CONTRACT_COLUMNS.items():
        names = schema.VIEWS[view].names
        assert set(cols) <= set(names), (view, set(cols) - set(names))
    for table in schema.TABLES.values():
        for f in table:
            if f.name.endswith("_ns") or f.name.endswith("bytes"):
                assert f.type == pa.int64(), f.name  # integer ns and bytes
    assert schema.TABLES["tensors"].field("shape").type == pa.list_(pa.int64())
    assert schema.SCHEMA_VERSION == 10  # 2: the Delta Lake (0004); 3: PyTorch depth (0005); 4: rollups (0006); 5: rollup_collectives (0007); 6: interval rollups (0008); 7: execution traces (0009), marker step times (0010), acceptances (0011), op FLOPs (0012); 8: files of many runs (0013); 9: files with dead rows named (0014); 10: fleet rollups (0015)


def test_real_views_have_the_contract_columns_and_types(seed_warehouse):
    """The views of a real warehouse (every format ingested) against the schema module."""
    from tracedb import catalog

    con = catalog.connect(seed_warehouse)
    for view, sch in schema.VIEWS.items():
        got = {name: typ for name, typ, *_ in con.execute(f"DESCRIBE {view}").fetchall()}
        assert set(schema.CONTRACT_COLUMNS.get(view, [])) <= set(got), view
        for f in sch:
            want = schema.duckdb_type(f.type).replace("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE")
            assert got[f.name] == want, (view, f.name, got[f.name])
    # and every parquet-backed view of the core schema holds rows from more than one format
    # (runtime_calls, annotations, steps and events are Kineto's for now)
    for table in schema.CORE_TABLES:
        n = con.execute(f"SELECT count(DISTINCT source_format) FROM {table}").fetchone()[0]
        assert n >= 2, table


def _cells(line: str) -> int:
    return len(re.split(r"(?<!\\)\|", line.strip().strip("|")))


def test_schema_md_rows_have_three_cells():
    bad = [line for line in (docs.DOCS / "schema.md").read_text().splitlines()
           if line.startswith("| `") and _cells(line) != 3]
    assert bad == [], f"rows with an unescaped | in a cell: {bad}"
