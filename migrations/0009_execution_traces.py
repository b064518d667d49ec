"""Schema 6 -> 7: PyTorch execution traces (issue 23 item 2).

- `nodes` gains `rf_id` (the record-function id a Kineto op and an execution-trace op
  share), `process_id`, `op_schema` and `parent_seq`;
- `tensors` gains `storage_id`, `storage_offset`, `numel`, `element_bytes`, `strides`,
  `node_seq` (the node that wrote the value) and `consumer_seqs` (the nodes that read it).

Old rows read the new columns as NULL: Kineto runs get `rf_id` and `process_id` when
re-ingested. Safe to re-run after a crash (a conformed file is left alone).
"""

from __future__ import annotations

TARGET = "lake"
TABLES = ("nodes", "tensors")


def up(lake) -> None:
    from tracedb import migrate

    lake.ensure_tables()
    for table in TABLES:
        migrate.evolve_lake_table(lake, table)
        migrate.conform_lake_table(lake, table)
