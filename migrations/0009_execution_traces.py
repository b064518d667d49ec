"""Schema 6 -> 7: PyTorch execution traces (issue 23 item 2).

- `nodes` gains `rf_id` (the record-function id a Kineto op and an execution-trace op
  share), `process_id`, `op_schema` and `parent_seq`;
- `tensors` gains `storage_id`, `storage_offset`, `numel`, `element_bytes`, `strides`,
  `node_seq` (the node that wrote the value) and `consumer_seqs` (the nodes that read it);
- every data table gets the Delta property `delta.dataSkippingStatsColumns = ingest_id`
  (`lake.DATA_TABLE_PROPERTIES`, as new lakes have it): `nodes` now has more than 32
  columns, past which Delta keeps no stats by default, and readers find a run's live
  files by their ingest_id stats.

Old rows read the new columns as NULL: Kineto runs get `rf_id` and `process_id` when
re-ingested. Safe to re-run after a crash (a conformed file is left alone).
"""

from __future__ import annotations

TARGET = "lake"
TABLES = ("nodes", "tensors")


def up(lake) -> None:
    from deltalake import DeltaTable

    from tracedb import migrate, schema
    from tracedb.lake import DATA_TABLE_PROPERTIES

    lake.ensure_tables()
    for table in schema.TABLES:  # before the new columns push ingest_id past the 32nd
        dt = DeltaTable(lake.uri(table), storage_options=lake._opts)
        if any(dt.metadata().configuration.get(k) != v for k, v in DATA_TABLE_PROPERTIES.items()):
            dt.alter.set_table_properties(DATA_TABLE_PROPERTIES)
    for table in TABLES:
        migrate.evolve_lake_table(lake, table)
        migrate.conform_lake_table(lake, table)
