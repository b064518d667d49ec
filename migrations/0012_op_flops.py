"""Schema 6 -> 7 (this migration's part): FLOPs and bytes per op on `nodes` (issue 26).

`nodes` gains `flops_rule`, `flops_dtype` and `flops_counted`. Every old nodes file is
rewritten with them filled by `tracedb.flops.annotate_nodes`, the function the readers
call at ingest: it needs only columns the rows already hold (`op_type`, `input_shapes`,
`input_dtypes`, the `Concrete Inputs` in `params`, `thread_id`, `start_ns`,
`duration_ns`; a TF node's `inputs` and its producers' `output_shapes`), so a PyTorch or
TF run ingested before gets the same `flops` and `memory_bytes` a re-ingest would give,
and MegEngine's footprint its `reported` rule.

Not backfilled (re-ingest the run to get them): the run metadata keys `gpu_name` /
`gpu_model` / `gpu_memory_bytes_per_s` that the peak lookups read (a run without them
takes its peak from the `gpu_model` / `peak_tflops` parameter or run.json label), a
MegEngine run's `input_dtypes` (its precision then defaults to fp32) and its kernels'
`node_seq` (its kernels then get no FLOPs in `roofline`).
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import migrate

    lake.ensure_tables()
    migrate.evolve_lake_table(lake, "nodes")
    # every file: a migration before this one in the same upgrade (0009) may have given them
    # the current schema already, with these columns NULL
    migrate.conform_lake_table(lake, "nodes", derive=_annotate, every=True)


def _annotate(table):
    import pyarrow as pa

    from tracedb.flops import annotate_nodes

    batches = [annotate_nodes(b) for b in table.combine_chunks().to_batches()]  # one batch: nesting spans it
    return pa.Table.from_batches(batches, schema=table.schema) if batches else table
