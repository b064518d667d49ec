"""tracedb's own Chrome-trace export (`tracedb export`), plain or gzipped: the rows back.

The export (tracedb.export) is a Kineto-shaped Chrome trace whose events each carry, in
`args.tracedb`, the table they are a row of and that row's columns but those the event
carries itself: `ts` is the time column (`start_ns`, `ts_ns` for allocations; µs after
the top-level `baseTimeNanoseconds`, as in Kineto), `dur`
`duration_ns`, `name` the name column (`name`, `node_name` for nodes). A key present in
`args.tracedb` wins (an explicit null: a NULL name or duration). `args.tracedb.also`
holds further rows drawn by the same event (a step on its ProfilerStep annotation); an
`M` event named `tracedb_row` holds a row without a time. Events without `args.tracedb`
(metadata, counters, `ac2g` flows) are drawing only and are skipped. So every row comes
back as it was exported, source_format and source_file included; the file's own format
(`files`, `runs.formats`) is `tracedb_export`.

Claimed by the top-level `tracedbExport` key that the export writes first; the Kineto
reader would otherwise claim the file by its categories and derive its own rows. One
streaming pass (`jsonstream.EventStream`, numbers with a fraction as Decimal: `ts`/`dur`
convert to ns exactly, other floats to the floats they were written from).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from tracedb import schema
from tracedb.errors import TraceFormatError
from tracedb.formats.base import BatchBuilder, ReadContext, flush, text_head
from tracedb.formats.jsonstream import EventStream, gc_paused, located, need, plain, us_to_ns

NAME = "tracedb_export"
DESCRIPTION = "tracedb's own Chrome-trace export (exact round trip), optionally gzipped"

VERSION = 1  # the newest `args.tracedb` layout this reader knows (tracedb.export.EXPORT_VERSION)
BATCH_ROWS = 16384
_MARK = re.compile(r'^\{\s*"tracedbExport"\s*:')
_TIME = {t: next(c for c in ("start_ns", "ts_ns") if c in s.names) for t, s in schema.SOURCE_TABLES.items()
         if {"start_ns", "ts_ns"} & set(s.names)}  # as tracedb.export.TIME_COLUMN
_NAME = {"kernels": "name", "nodes": "node_name", "runtime_calls": "name", "annotations": "name",
         "steps": "name", "events": "name"}  # as tracedb.export.NAME_COLUMN
_FLOATS = {t: {f.name for f in s if pa.types.is_floating(f.type)} for t, s in schema.SOURCE_TABLES.items()}


def sniff(head: bytes) -> bool:
    return bool(_MARK.match(text_head(head).lstrip()))


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    return gc_paused(located(_read(path, ctx)))  # errors name the event (jsonstream.located)


def _read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    stream = EventStream(path, floats="decimal")
    # Nodes come back with the FLOPs columns that were exported, not derived again.
    out = {t: BatchBuilder(t, BATCH_ROWS, annotate=False) for t in schema.SOURCE_TABLES}
    checked = False
    for i, ev in enumerate(stream):
        if not checked:
            base = _check_version(stream.meta, ctx)
            checked = True
        args = ev.get("args")
        tracedb = args.get("tracedb") if isinstance(args, dict) else None
        if tracedb is None:
            continue  # drawing only: metadata, counters, flows
        if not isinstance(tracedb, dict):
            raise TraceFormatError("args.tracedb is not an object")
        timed = ev.get("ph") != "M"
        for table, row in _rows(ev, tracedb, i, timed, base):
            yield from out[table].append(row)
    if not checked:
        _check_version(stream.meta, ctx)
    yield from flush(*out.values())


def _check_version(meta: dict, ctx: ReadContext) -> int:
    """The export's base time (ns), once its version is one this reader knows."""
    mark = meta.get("tracedbExport")
    version = mark.get("version") if isinstance(mark, dict) else None
    if type(version) is not int or version > VERSION:
        raise TraceFormatError(f"tracedbExport version {version!r}: this tracedb reads version {VERSION} "
                               "or older (upgrade tracedb)")
    ctx.metadata["tracedb_export"] = {k: plain(v) for k, v in mark.items()}
    base = meta.get("baseTimeNanoseconds", 0)
    if type(base) is not int:
        raise TraceFormatError(f"baseTimeNanoseconds {base!r} is not an integer")
    return base


def _rows(ev: dict, tracedb: dict, i: int, timed: bool, base: int) -> Iterator[tuple[str, dict]]:
    table = tracedb.get("table")
    if table not in schema.SOURCE_TABLES:
        raise TraceFormatError(f"args.tracedb.table {table!r} is no table (tables: {', '.join(schema.SOURCE_TABLES)})")
    row: dict[str, Any] = {}
    if timed:
        if table not in _TIME:
            raise TraceFormatError(f"a {table} row cannot be a timed event")
        row[_TIME[table]] = base + us_to_ns(need(ev, "ts", i))
        if "dur" in ev and "duration_ns" in schema.SOURCE_TABLES[table].names:
            row["duration_ns"] = us_to_ns(ev["dur"])
        if table in _NAME:
            row[_NAME[table]] = ev.get("name")
    yield table, _columns(table, tracedb, row)
    also = tracedb.get("also") or []
    if not isinstance(also, list):
        raise TraceFormatError("args.tracedb.also is not a list")
    for extra in also:
        if not isinstance(extra, dict) or extra.get("table") not in schema.SOURCE_TABLES:
            raise TraceFormatError(f"args.tracedb.also holds {str(extra)[:60]!r}, not a row of a table")
        yield extra["table"], _columns(extra["table"], extra, {})


def _columns(table: str, tracedb: dict, row: dict) -> dict:
    names = schema.SOURCE_TABLES[table].names
    floats = _FLOATS[table]
    for k, v in tracedb.items():
        if k in ("table", "also"):
            continue
        if k not in names or k == "run_id":
            raise TraceFormatError(f"args.tracedb: {table} has no column {k!r} (exported by a newer tracedb?)")
        v = plain(v)
        row[k] = float(v) if k in floats and type(v) is int else v
    return row
