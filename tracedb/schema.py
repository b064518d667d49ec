"""The warehouse schema as code: Arrow schemas of every view and the schema version.

Times are integer nanoseconds, sizes integer bytes (contract). `docs/schema.md` is
generated from this module (`python -m tracedb.docs`) and a test keeps the two in sync.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 2  # 2: Delta Lake tables, rows carry ingest_id (migration 0004)

_SHAPE = pa.list_(pa.int64())
_STRS = pa.list_(pa.string())


def _f(name: str, typ: pa.DataType, doc: str) -> pa.Field:
    return pa.field(name, typ, metadata={"doc": doc})


# Columns every parquet-backed table starts with. run_id/device are also the partition keys.
_COMMON = [
    _f("run_id", pa.string(), "run the row belongs to"),
    _f("device", pa.string(), "canonical device TYPE:INDEX, e.g. GPU:0, CPU:0"),
    _f("device_raw", pa.string(), "device string as the source wrote it"),
    _f("rank", pa.int32(), "distributed rank of the process that wrote the trace, when known"),
    _f("step", pa.int64(), "training/inference step (ProfilerStep#N, or the step file's ordinal)"),
]

_TAIL = [
    _f("source_format", pa.string(), "reader that produced the row (tf_stepstats, megengine, kineto, ...)"),
    _f("source_file", pa.string(), "trace file the row came from, relative to the ingested path"),
]

NODES = pa.schema(
    _COMMON
    + [
        _f("node_name", pa.string(), "framework op / graph node name"),
        _f("op_type", pa.string(), "op type (MatMul, Conv2D, aten::mm, ...)"),
        _f("start_ns", pa.int64(), "start time, ns (NULL when the source has no timing)"),
        _f("duration_ns", pa.int64(), "whole execution time, ns (NULL when untimed)"),
        _f("thread_id", pa.int64(), "host thread id"),
        _f("seq", pa.int64(), "position of the node in its source (file order / execution order)"),
        _f("op_start_ns", pa.int64(), "start of the op's compute part, ns (TF op_start_rel)"),
        _f("op_end_ns", pa.int64(), "end of the op's compute part, ns (TF op_end_rel)"),
        _f("scheduled_ns", pa.int64(), "time the node was scheduled, ns"),
        _f("timeline_label", pa.string(), "source's label, e.g. `name = Op(inputs)`"),
        _f("inputs", _STRS, "data inputs (names)"),
        _f("control_inputs", _STRS, "control inputs (`^name` in dumps)"),
        _f("outputs", _STRS, "output names"),
        _f("input_shapes", pa.list_(_SHAPE), "input shapes"),
        _f("input_dtypes", _STRS, "input dtypes"),
        _f("output_shapes", pa.list_(_SHAPE), "output shapes"),
        _f("output_dtypes", _STRS, "output dtypes"),
        _f("flops", pa.int64(), "floating point operations (MegEngine footprint)"),
        _f("memory_bytes", pa.int64(), "memory traffic, bytes (MegEngine footprint)"),
        _f("temp_memory_bytes", pa.int64(), "temporary memory, bytes (TF)"),
        _f("persistent_memory_bytes", pa.int64(), "persistent memory, bytes (TF)"),
        _f("correlation_id", pa.int64(), "External id / correlation linking to kernels"),
        _f("params", pa.string(), "further attributes as JSON"),
    ]
    + _TAIL
)

KERNELS = pa.schema(
    _COMMON
    + [
        _f("stream", pa.int64(), "GPU stream"),
        _f("kind", pa.string(), "kernel | memcpy | memset"),
        _f("name", pa.string(), "kernel name (or copy kind)"),
        _f("node_name", pa.string(), "op that launched it, when known"),
        _f("start_ns", pa.int64(), "start, ns"),
        _f("duration_ns", pa.int64(), "duration, ns"),
        _f("bytes", pa.int64(), "bytes moved or set (copies and sets)"),
        _f("copy_kind", pa.string(), "HtoD | DtoH | DtoD | HtoH | PtoP, for copies"),
        _f("correlation_id", pa.int64(), "launch correlation id"),
        _f("launch_start_ns", pa.int64(), "start of the host launch call, ns, when known"),
        _f("grid", _SHAPE, "grid dimensions"),
        _f("block", _SHAPE, "block dimensions"),
        _f("registers_per_thread", pa.int64(), "registers per thread"),
        _f("shared_memory_bytes", pa.int64(), "shared memory, bytes"),
        _f("occupancy", pa.float64(), "estimated achieved occupancy, %"),
        _f("kern_ns", pa.int64(), "MegEngine `kern` timestamp, ns"),
        _f("params", pa.string(), "further attributes as JSON"),
    ]
    + _TAIL
)

TENSORS = pa.schema(
    _COMMON
    + [
        _f("node_name", pa.string(), "node that produced the tensor"),
        _f("slot", pa.int64(), "output slot"),
        _f("tensor_name", pa.string(), "tensor / var name when the source names it"),
        _f("tensor_id", pa.int64(), "source's tensor / var id"),
        _f("dtype", pa.string(), "element type (float32, int32, ...)"),
        _f("shape", _SHAPE, "shape"),
        _f("requested_bytes", pa.int64(), "bytes requested"),
        _f("allocated_bytes", pa.int64(), "bytes allocated"),
        _f("allocator", pa.string(), "allocator name"),
        _f("allocation_id", pa.int64(), "allocation id"),
        _f("ptr", pa.int64(), "device address"),
        _f("params", pa.string(), "further attributes as JSON"),
    ]
    + _TAIL
)

ALLOCATIONS = pa.schema(
    _COMMON
    + [
        _f("allocator", pa.string(), "allocator name"),
        _f("node_name", pa.string(), "node / op / owner the memory belongs to"),
        _f("ts_ns", pa.int64(), "time of the event, ns (NULL for a planned chunk)"),
        _f("bytes", pa.int64(), "bytes, negative for a free"),
        _f("address", pa.int64(), "device address"),
        _f("total_allocated_bytes", pa.int64(), "allocator's total allocated after the event"),
        _f("total_reserved_bytes", pa.int64(), "allocator's total reserved after the event"),
        _f("kind", pa.string(), "alloc | free | chunk"),
        _f("params", pa.string(), "further attributes as JSON"),
    ]
    + _TAIL
)

# Parquet-backed tables, in the order readers and docs list them.
TABLES: dict[str, pa.Schema] = {
    "nodes": NODES,
    "kernels": KERNELS,
    "tensors": TENSORS,
    "allocations": ALLOCATIONS,
}

RUNS = pa.schema(
    [
        _f("run_id", pa.string(), "run id (folder name, file stem, or --run-id)"),
        _f("ingested_at", pa.timestamp("us", tz="UTC"), "when the run was last ingested"),
        _f("status", pa.string(), "complete (every source file read) | partial (ingested with --partial: some files failed)"),
        _f("source_files", _STRS, "trace files of the run"),
        _f("formats", _STRS, "formats found in the run"),
        _f("model", pa.string(), "label from run.json"),
        _f("commit", pa.string(), "label from run.json"),
        _f("hardware", pa.string(), "label from run.json"),
        _f("started_at", pa.timestamp("us", tz="UTC"), "label from run.json"),
        _f("labels", pa.string(), "every run.json label, as JSON"),
        _f("metadata", pa.string(), "source metadata (device properties, distributed info), as JSON"),
    ]
)

# `files` (each run's source files as last ingested) and `ingest_log` (every attempt).
FILES = pa.schema(
    [
        _f("run_id", pa.string(), "run the source file belongs to"),
        _f("path", pa.string(), "source file, relative to the run folder"),
        _f("size_bytes", pa.int64(), "size of the source file, bytes"),
        _f("sha256", pa.string(), "SHA-256 of the source file"),
        _f("format", pa.string(), "reader that claimed it (NULL when none did)"),
    ]
    + [_f(f"rows_{t}", pa.int64(), f"rows it gave to `{t}` (NULL on error)") for t in TABLES]
    + [
        _f("status", pa.string(), "ok | error"),
        _f("error", pa.string(), "one-line error, when status = error"),
        _f("seconds", pa.float64(), "time spent reading it"),
        _f("ingest_id", pa.string(), "ingest that read it"),
        _f("ingested_at", pa.timestamp("us", tz="UTC"), "when it was read"),
        _f("metadata", pa.string(), "source metadata (device properties, distributed info), as JSON"),
        _f("warnings", pa.string(), "counts of odd values the reader kept or dropped, as JSON"),
    ]
)

# What each data file held when it was written, for `tracedb check` (Delta's log keeps
# the size but no content hash).
CHECKSUMS = pa.schema(
    [
        _f("table_name", pa.string(), "data table of the file"),
        _f("run_id", pa.string(), "run of the file"),
        _f("path", pa.string(), "file, relative to the warehouse"),
        _f("size_bytes", pa.int64(), "size when written, bytes"),
        _f("sha256", pa.string(), "SHA-256 of the file when written"),
        _f("ingest_id", pa.string(), "ingest (or optimize) that wrote it"),
    ]
)

# Metadata tables: Delta tables too, unpartitioned.
META_TABLES: dict[str, pa.Schema] = {"runs": RUNS, "files": FILES, "ingest_log": FILES, "checksums": CHECKSUMS}
# Every Delta table of the lake.
ALL_TABLES: dict[str, pa.Schema] = {**TABLES, **META_TABLES}
TABLE_DOCS: dict[str, str] = {
    "nodes": "execution of a framework op, or a graph node listed without timing",
    "kernels": "GPU stream activity: kernel, memcpy, memset, with the op that launched it",
    "tensors": "output tensor of a node: dtype, shape, bytes, allocator",
    "allocations": "allocation / free event, or planned memory chunk",
    "runs": "one row per run: its live ingest, files, formats and run.json labels",
    "files": "every source file of every run as last ingested",
    "ingest_log": "every ingest attempt of every source file (append-only)",
    "checksums": "size and SHA-256 of every data file when written (append-only), for `tracedb check`",
}

VIEWS: dict[str, pa.Schema] = {"runs": RUNS, **TABLES, "files": FILES, "ingest_log": FILES}

# Columns the contract promises; tests check each is present.
CONTRACT_COLUMNS: dict[str, list[str]] = {
    "runs": ["run_id", "ingested_at", "source_files", "formats"],
    "nodes": ["run_id", "device", "device_raw", "step", "node_name", "op_type", "start_ns",
              "duration_ns", "thread_id", "source_format"],
    "kernels": ["run_id", "device", "stream", "step", "kind", "name", "node_name", "start_ns",
                "duration_ns", "bytes"],
    "tensors": ["run_id", "device", "node_name", "slot", "dtype", "shape", "requested_bytes",
                "allocated_bytes", "allocator", "allocation_id"],
    "allocations": ["run_id", "device", "allocator", "node_name", "ts_ns", "bytes"],
}


def duckdb_type(typ: pa.DataType) -> str:
    """DuckDB SQL type for an Arrow type (used for empty views and casts)."""
    if pa.types.is_list(typ):
        return duckdb_type(typ.value_type) + "[]"
    if pa.types.is_timestamp(typ):
        return "TIMESTAMPTZ" if typ.tz else "TIMESTAMP"
    return {
        pa.string(): "VARCHAR",
        pa.int64(): "BIGINT",
        pa.int32(): "INTEGER",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
    }[typ]


def schema_markdown() -> str:
    """docs/schema.md, generated."""
    out = [
        "# tracedb schema",
        "",
        f"Schema version {SCHEMA_VERSION}. Generated from `tracedb/schema.py` "
        "(`python -m tracedb.docs`); do not edit by hand.",
        "",
        "Times are integer nanoseconds (BIGINT); sizes are integer bytes (BIGINT).",
    ]
    for view, schema in VIEWS.items():
        out += ["", f"## `{view}`", "", "| column | type | meaning |", "|---|---|---|"]
        for field in schema:
            doc = (field.metadata or {}).get(b"doc", b"").decode().replace("|", "\\|")
            out.append(f"| `{field.name}` | {duckdb_type(field.type)} | {doc} |")
    return "\n".join(out) + "\n"

