"""The schema is code: docs are generated from it, and the contract's columns exist."""

from __future__ import annotations

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
    assert schema.SCHEMA_VERSION == 1
